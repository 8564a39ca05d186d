"""TabM (parameter-efficient ensembling of MLPs via BatchEnsemble) for tabular classification, by hand.

Inputs: 64 numeric features through piecewise-linear encoding (PLE): 48 bins a feature from
torch.quantile of a 100,000-row training sample (a (49, 64) tensor of edges), each value encoded as its
clamped position in every bin (first bin open below, last open above) -> 3,072 inputs; 6 categorical
features one-hot. TabM with k = 32 members: the batch repeated 32 times, every Linear a BatchEnsemble
layer ((x * r_k) @ W) * s_k + b_k with shared W and per-member r, s (random-sign initialised) and biases,
3 blocks of 512 with ReLU and dropout 0.1, per-member heads to 10 classes by einsum. The loss is the
mean of the 32 members' cross entropies.

Training: batch 4,096 (131,072 member rows), fp32, foreach AdamW (lr 2e-3, weight decay 3e-4).

Phases: the bins and the first step; 3 more steps; inference_mode evaluation of 65,536 rows in chunks of
16,384 (the members' softmax averaged); then 3 steps under fp16 autocast with torch.amp.GradScaler, a
fresh fused AdamW, unscale_ and clip_grad_norm_ at 1.0, batch 8,192. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2133)
if SMALL:
    N_NUM, N_BINS, K, D, BATCH, N_TRAIN, N_TEST = 8, 8, 4, 32, 128, 2000, 1000
else:
    N_NUM, N_BINS, K, D, BATCH, N_TRAIN, N_TEST = 64, 48, 32, 512, 4096, 100_000, 65_536
CARDS = [4, 9, 2, 15, 6, 11]
CLASSES, BLOCKS = 10, 3
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def random_signs(*shape):
    return torch.randint(0, 2, shape).float() * 2 - 1


class PLE(nn.Module):
    def __init__(self, edges):
        super().__init__()
        self.register_buffer("left", edges[:-1].T.contiguous())
        self.register_buffer("width", (edges[1:] - edges[:-1]).T.clamp(min=1e-6).contiguous())

    def forward(self, x):
        z = (x.unsqueeze(-1) - self.left) / self.width
        z = torch.cat(
            [z[..., :1].clamp(max=1.0), z[..., 1:-1].clamp(0.0, 1.0), z[..., -1:].clamp(min=0.0)],
            dim=-1,
        )
        return z.flatten(1)


class BELinear(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in))
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)
        self.r = nn.Parameter(random_signs(K, d_in))
        self.s = nn.Parameter(random_signs(K, d_out))
        self.bias = nn.Parameter(torch.zeros(K, d_out).uniform_(-(d_in**-0.5), d_in**-0.5))

    def forward(self, x):
        return F.linear(x * self.r, self.weight) * self.s + self.bias


class TabM(nn.Module):
    def __init__(self, edges):
        super().__init__()
        self.ple = PLE(edges)
        d_in = N_NUM * N_BINS + sum(CARDS)
        self.blocks = nn.ModuleList([BELinear(d_in if i == 0 else D, D) for i in range(BLOCKS)])
        self.head_w = nn.Parameter(torch.randn(K, D, CLASSES) * D**-0.5)
        self.head_b = nn.Parameter(torch.zeros(K, CLASSES))

    def forward(self, x_num, x_cat):
        onehot = torch.cat([F.one_hot(x_cat[:, i], c) for i, c in enumerate(CARDS)], dim=1).to(x_num.dtype)
        x = torch.cat([self.ple(x_num), onehot], dim=1)
        x = x.unsqueeze(1).expand(-1, K, -1)
        for blk in self.blocks:
            x = F.dropout(F.relu(blk(x)), 0.1, self.training)
        return torch.einsum("bkd,kdc->bkc", x, self.head_w) + self.head_b


w_true = torch.randn(N_NUM, CLASSES, device=device)


def make_batch(n):
    x_num = torch.randn(n, N_NUM, device=device) * torch.linspace(0.5, 3.0, N_NUM, device=device)
    x_cat = torch.stack([torch.randint(0, c, (n,), device=device) for c in CARDS], dim=1)
    y = (torch.sin(x_num) @ w_true + x_cat[:, :1].float()).argmax(dim=1)
    return x_num, x_cat, y


sample = make_batch(N_TRAIN)[0]
q = torch.linspace(0, 1, N_BINS + 1, device=device)
edges = torch.quantile(sample, q, dim=0)
del sample
model = TabM(edges).to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=3e-4, foreach=True)


def member_loss(logits, y):
    return F.cross_entropy(logits.flatten(0, 1).float(), y.repeat_interleave(K))


model.train()
for step in range(4):
    x_num, x_cat, y = make_batch(BATCH)
    loss = member_loss(model(x_num, x_cat), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step == 0:
        print(f"step 0 loss {loss.item():.4f}")
        report("bins and first step")
print(f"step 3 loss {loss.item():.4f}")
report("train")

model.eval()
correct = torch.zeros((), device=device, dtype=torch.long)
with torch.inference_mode():
    x_num, x_cat, y = make_batch(N_TEST)
    for i in range(0, N_TEST, 16384):
        probs = model(x_num[i : i + 16384], x_cat[i : i + 16384]).softmax(-1).mean(1)
        correct += (probs.argmax(-1) == y[i : i + 16384]).sum()
print(f"test accuracy {correct.item() / N_TEST:.4f}")
report("eval")

del opt
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=3e-4, fused=amp)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
for step in range(3):
    x_num, x_cat, y = make_batch(2 * BATCH)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = member_loss(model(x_num, x_cat), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"fp16 step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
