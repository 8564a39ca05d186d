"""A token-mixing MLP encoder and a pooled classification head made into CUDA graphs together with
`torch.cuda.make_graphed_callables((encoder, head), ((x,), (h, mask)), num_warmup_iters=1,
allow_unused_input=True)`: the head takes a padding mask it does not use in training (its masked
pooling is only for evaluation), so its graph is captured with an unused input; both graphs share
one private memory pool (the head's backward captured first). The allocator is configured before
torch is imported with `PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:48,roundup_power2_divisions:[128:4,>:2]"`;
TF32 matmuls, fp32 weights, AdamW (foreach) stepping eagerly between replays. Evaluation runs in
eval mode (the graphed modules fall back to their eager forward) under no_grad; then the graphed
forwards are removed (`del module.forward`), the graphs dropped and `empty_cache()` called, and the
model trains eagerly at a new sequence length.

Phases: 0 model and optimizer built; 1 make_graphed_callables (warmup and capture); 2 five graphed
training steps; 3 eager evaluation in eval mode; 4 graphs dropped, empty_cache, three eager steps at
a new shape."""

import gc
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:48,roundup_power2_divisions:[128:4,>:2]"

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3333)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True
if SMALL:
    B, T, D, L, C, T2 = 4, 16, 32, 2, 10, 24
else:
    B, T, D, L, C, T2 = 64, 256, 512, 8, 1000, 320


class MixerBlock(nn.Module):
    def __init__(self, t):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.tok = nn.Sequential(nn.Linear(t, 2 * t), nn.GELU(), nn.Linear(2 * t, t))
        self.ch = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x):
        x = x + self.tok(self.ln1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.ln2(x))


class Encoder(nn.Module):
    def __init__(self, t):
        super().__init__()
        self.inp = nn.Linear(D, D)
        self.blocks = nn.Sequential(*[MixerBlock(t) for _ in range(L)])

    def forward(self, x):
        return self.blocks(self.inp(x))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.fc = nn.Linear(D, C)

    def forward(self, h, mask):
        h = self.norm(h)
        if self.training:
            return self.fc(h.mean(1))
        w = mask.unsqueeze(-1).to(h.dtype)
        return self.fc((h * w).sum(1) / w.sum(1).clamp_min(1))


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


encoder, head = Encoder(T).to(device), Head().to(device)
opt = torch.optim.AdamW(list(encoder.parameters()) + list(head.parameters()), lr=1e-3)
static_x = torch.randn(B, T, D, device=device)
static_mask = torch.ones(B, T, dtype=torch.bool, device=device)
static_y = torch.randint(0, C, (B,), device=device)
report("phase0 built")

if device == "cuda":
    sample_h = torch.randn(B, T, D, device=device, requires_grad=True)
    encoder, head = torch.cuda.make_graphed_callables(
        (encoder, head),
        ((static_x,), (sample_h, static_mask)),
        num_warmup_iters=1,
        allow_unused_input=True,
    )
    del sample_h
report("phase1 graphed")

for step in range(5):
    static_x.copy_(torch.randn(B, T, D, device=device))
    static_y.copy_(torch.randint(0, C, (B,), device=device))
    logits = head(encoder(static_x), static_mask)
    loss = F.cross_entropy(logits, static_y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("graphed step", step, round(loss.item(), 4))
del logits, loss
report("phase2 graphed training")

encoder.eval()
head.eval()
with torch.no_grad():
    for n in range(3):
        x = torch.randn(B, T, D, device=device)
        mask = torch.arange(T, device=device) < (T - 32 * n)
        pred = head(encoder(x), mask.expand(B, T)).argmax(-1)
        print("eval", n, pred.shape)
del x, mask, pred
encoder.train()
head.train()
report("phase3 eager eval")

if device == "cuda":
    del encoder.forward, head.forward
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()
encoder2 = Encoder(T2).to(device)
encoder2.inp.load_state_dict(encoder.inp.state_dict())
for blk2, blk in zip(encoder2.blocks, encoder.blocks, strict=False):
    blk2.ch.load_state_dict(blk.ch.state_dict())
del encoder, opt
opt = torch.optim.AdamW(list(encoder2.parameters()) + list(head.parameters()), lr=1e-3)
for step in range(3):
    x = torch.randn(B, T2, D, device=device)
    y = torch.randint(0, C, (B,), device=device)
    loss = F.cross_entropy(head(encoder2(x), None), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("eager step", step, round(loss.item(), 4))
report("phase4 eager new shape")
