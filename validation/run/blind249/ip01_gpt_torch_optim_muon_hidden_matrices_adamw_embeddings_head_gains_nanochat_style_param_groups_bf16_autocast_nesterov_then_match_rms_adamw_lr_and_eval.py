"""torch.optim.Muon (PyTorch 2.9+) as nanochat and modded-nanogpt use it: a 6-layer GPT (d 1024, 16 heads
through SDPA, vocab 32768, untied head) whose 2-D hidden weights (attention and MLP projections) are
optimised by `torch.optim.Muon` (momentum 0.95, Nesterov, 5 Newton-Schulz steps in bf16:
torch/optim/_muon.py `_zeropower_via_newtonschulz`) and whose embedding, head and LayerNorm gains go to
AdamW (fused). fp32 weights, bf16 autocast forward, batch 8 x 1024, two steps; then Muon rebuilt with
`adjust_lr_fn="match_rms_adamw"` and weight decay for two more steps; then evaluation under
inference_mode.

No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2491)
V, D, H, L, T, B = 32768, 1024, 16, 6, 1024, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D, bias=False), nn.LayerNorm(D, bias=False)
        self.qkv, self.o = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.fc, self.proj = nn.Linear(D, 4 * D, bias=False), nn.Linear(4 * D, D, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D))
        return x + self.proj(F.relu(self.fc(self.n2(x))).square())


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.nf = nn.LayerNorm(D, bias=False)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.nf(x))


model = GPT().cuda()
idx = torch.randint(0, V, (B, T), device="cuda")
tgt = torch.randint(0, V, (B, T), device="cuda")
hidden = [p for n, p in model.blocks.named_parameters() if p.ndim == 2]
rest = [model.emb.weight, model.head.weight] + [p for p in model.parameters() if p.ndim == 1]


def muon(**kw):
    return torch.optim.Muon(hidden, lr=0.02, momentum=0.95, nesterov=True, **kw)


opts = [muon(), torch.optim.AdamW(rest, lr=3e-4, betas=(0.8, 0.95), fused=True)]
report("setup")


def train(steps):
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(idx)
        loss = F.cross_entropy(logits.float().view(-1, V), tgt.view(-1))
        del logits
        loss.backward()
        for opt in opts:
            opt.step()
        model.zero_grad(set_to_none=True)
        del loss


train(2)
report("train_muon_nesterov_and_fused_adamw")

opts[0] = muon(adjust_lr_fn="match_rms_adamw", weight_decay=0.01)
train(2)
report("train_muon_match_rms_adamw_rebuilt")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    logits = model(idx[:4])
    nll = F.cross_entropy(logits.float().view(-1, V), tgt[:4].view(-1))
    del logits, nll
report("eval_inference_mode_bf16")
