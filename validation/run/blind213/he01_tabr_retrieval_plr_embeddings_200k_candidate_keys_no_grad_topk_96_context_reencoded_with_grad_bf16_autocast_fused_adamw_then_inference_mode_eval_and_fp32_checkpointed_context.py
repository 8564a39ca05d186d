"""TabR-style retrieval-augmented tabular regression written by hand.

Features: 48 numeric columns through PLR embeddings (per-feature periodic sin/cos of 24 learned
frequencies, a per-feature linear layer to 16 by einsum, ReLU) and 8 categorical columns one-hot
encoded (cardinalities 3..31), concatenated to 859 inputs. Encoder: Linear to 256 and one residual MLP
block. Keys: Linear(LayerNorm(h)). The candidate set is 200,000 training rows kept on the device.

Each training step: the keys of all candidates computed under no_grad in chunks of 50,000, squared
Euclidean distances of the batch's keys to them (matmul form), the batch's own rows masked with -inf,
topk 96 context rows; the context rows gathered and re-encoded WITH gradients (batch x 96 rows), values
= label embedding + T(k - k_ctx), softmax over the negative distances, weighted sum, residual predictor
with LayerNorm, MSE. Batch 1,024, bf16 autocast, fused AdamW (lr 3e-4, wd 1e-5).

Phases: the first step; 3 more steps; inference_mode evaluation of 16,384 test rows in chunks of 4,096
against the candidate keys computed once; then the optimizer dropped, empty_cache(), and 3 steps in fp32
at batch 512 with the context encoder under torch.utils.checkpoint (use_reentrant=False) and a new
foreach AdamW. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2131)
if SMALL:
    N_CAND, N_TEST, BATCH, CTX, CHUNK = 4000, 512, 64, 16, 1000
else:
    N_CAND, N_TEST, BATCH, CTX, CHUNK = 200_000, 16_384, 1024, 96, 50_000
N_NUM, N_FREQ, D_EMB = 48, 24, 16
CARDS = [3, 7, 12, 5, 20, 9, 4, 31]
D = 256
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class PLR(nn.Module):
    def __init__(self, n_features, n_freq, d_out, sigma=0.1):
        super().__init__()
        self.freq = nn.Parameter(torch.randn(n_features, n_freq) * sigma)
        self.weight = nn.Parameter(torch.randn(n_features, 2 * n_freq, d_out) / (2 * n_freq) ** 0.5)
        self.bias = nn.Parameter(torch.zeros(n_features, d_out))

    def forward(self, x):
        z = 2 * torch.pi * self.freq * x.unsqueeze(-1)
        z = torch.cat([torch.cos(z), torch.sin(z)], dim=-1)
        z = torch.einsum("bfi,fio->bfo", z, self.weight) + self.bias
        return F.relu(z).flatten(1)


class Block(nn.Module):
    def __init__(self, d, prenorm=True, drop=0.1):
        super().__init__()
        self.norm = nn.LayerNorm(d) if prenorm else nn.Identity()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.drop = drop

    def forward(self, x):
        h = F.relu(self.fc1(self.norm(x)))
        return x + self.fc2(F.dropout(h, self.drop, self.training))


class TabR(nn.Module):
    def __init__(self):
        super().__init__()
        self.plr = PLR(N_NUM, N_FREQ, D_EMB)
        d_in = N_NUM * D_EMB + sum(CARDS)
        self.lin = nn.Linear(d_in, D)
        self.enc = Block(D, prenorm=False)
        self.key_norm = nn.LayerNorm(D)
        self.key = nn.Linear(D, D)
        self.label = nn.Linear(1, D)
        self.t = nn.Sequential(
            nn.Linear(D, 2 * D), nn.ReLU(), nn.Dropout(0.1), nn.Linear(2 * D, D, bias=False)
        )
        self.pred = nn.Sequential(Block(D), nn.LayerNorm(D), nn.ReLU(), nn.Linear(D, 1))
        self.checkpoint_context = False

    def encode(self, x_num, x_cat):
        onehot = torch.cat([F.one_hot(x_cat[:, i], c) for i, c in enumerate(CARDS)], dim=1).to(x_num.dtype)
        h = self.enc(self.lin(torch.cat([self.plr(x_num), onehot], dim=1)))
        return h, self.key(self.key_norm(h))

    @torch.no_grad()
    def candidate_keys(self, cand_num, cand_cat):
        return torch.cat(
            [
                self.encode(cand_num[i : i + CHUNK], cand_cat[i : i + CHUNK])[1]
                for i in range(0, len(cand_num), CHUNK)
            ]
        )

    def forward(self, x_num, x_cat, cand_k, cand_num, cand_cat, cand_y, self_idx=None):
        h, k = self.encode(x_num, x_cat)
        with torch.no_grad():
            dist = k.float().square().sum(1, keepdim=True) - 2 * k.float() @ cand_k.float().T
            dist = dist + cand_k.float().square().sum(1)
            if self_idx is not None:
                dist[torch.arange(len(k), device=k.device), self_idx] = float("inf")
            ctx_idx = dist.topk(CTX, dim=1, largest=False).indices
        b = len(k)
        flat = ctx_idx.flatten()
        if self.training:
            if self.checkpoint_context:
                ctx_k = checkpoint(
                    lambda a, c: self.encode(a, c)[1], cand_num[flat], cand_cat[flat], use_reentrant=False
                )
            else:
                ctx_k = self.encode(cand_num[flat], cand_cat[flat])[1]
            ctx_k = ctx_k.view(b, CTX, D)
        else:
            ctx_k = cand_k[ctx_idx]
        sim = -(k.unsqueeze(1) - ctx_k).square().sum(-1)
        probs = F.dropout(sim.softmax(dim=1), 0.1, self.training)
        values = self.label(cand_y[ctx_idx].unsqueeze(-1)) + self.t(k.unsqueeze(1) - ctx_k)
        h = h + (probs.unsqueeze(-1) * values).sum(1)
        return self.pred(h).squeeze(-1)


cand_num = torch.randn(N_CAND, N_NUM, device=device)
cand_cat = torch.stack([torch.randint(0, c, (N_CAND,), device=device) for c in CARDS], dim=1)
w_true = torch.randn(N_NUM, device=device) / N_NUM**0.5
cand_y = (
    torch.tanh(cand_num @ w_true) + 0.1 * cand_cat[:, 0].float() + 0.05 * torch.randn(N_CAND, device=device)
)
test_num = torch.randn(N_TEST, N_NUM, device=device)
test_cat = torch.stack([torch.randint(0, c, (N_TEST,), device=device) for c in CARDS], dim=1)
test_y = torch.tanh(test_num @ w_true) + 0.1 * test_cat[:, 0].float()

model = TabR().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-5, fused=amp)


def train_step(batch, use_amp):
    idx = torch.randint(0, N_CAND, (batch,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
        cand_k = model.candidate_keys(cand_num, cand_cat)
        pred = model(cand_num[idx], cand_cat[idx], cand_k, cand_num, cand_cat, cand_y, self_idx=idx)
        loss = F.mse_loss(pred.float(), cand_y[idx])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"step 0 loss {train_step(BATCH, amp):.4f}")
report("first step")
for _ in range(3):
    loss = train_step(BATCH, amp)
print(f"step 3 loss {loss:.4f}")
report("train")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    cand_k = model.candidate_keys(cand_num, cand_cat)
    se = torch.zeros((), device=device)
    for i in range(0, N_TEST, 4096):
        pred = model(test_num[i : i + 4096], test_cat[i : i + 4096], cand_k, cand_num, cand_cat, cand_y)
        se += (pred.float() - test_y[i : i + 4096]).square().sum()
    print(f"test rmse {(se / N_TEST).sqrt().item():.4f}")
    del cand_k, pred
report("eval")

del opt
torch.cuda.empty_cache()
model.train()
model.checkpoint_context = True
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-5, foreach=True)
for step in range(3):
    loss = train_step(BATCH // 2, False)
    print(f"fp32 checkpointed step {step} loss {loss:.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
