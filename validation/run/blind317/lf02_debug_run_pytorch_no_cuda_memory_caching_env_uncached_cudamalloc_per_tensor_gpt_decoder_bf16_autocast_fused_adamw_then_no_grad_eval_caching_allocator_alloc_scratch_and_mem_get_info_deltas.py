"""A debugging run of a small GPT training script with PyTorch's caching allocator switched off: the script
sets `PYTORCH_NO_CUDA_MEMORY_CACHING=1` before torch is imported (what one does to run a program under
compute-sanitizer or to find a use-after-free), so every tensor's storage is its own `cudaMalloc`, freed by
`cudaFree` when the tensor dies, and nothing is cached.

The model: a hand-written pre-LayerNorm GPT decoder (6 blocks, 768 wide, 12 heads, SDPA with `is_causal`, GELU
MLP, tied embedding/lm_head, 8,192-token vocabulary), fp32 weights under bf16 autocast, `AdamW(fused=True)`.
The script prints the driver's view (`torch.cuda.mem_get_info()`) beside the allocator's figures after each
phase; nothing depends on either.

Phases: set-up (model, optimizer); 4 training steps at batch 16 x 512 tokens; a `no_grad` evaluation at batch
32; a scratch buffer of 64 MB taken and returned through `torch.cuda.caching_allocator_alloc` /
`caching_allocator_delete` beside a few plain tensors, then `empty_cache()`. 4 phases. Seeded; no
value-dependent sizes."""

import os

os.environ["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3172)
dev = torch.device("cuda")
V, D, NH, L, T = 8192, 768, 12, 6, 512


def report(tag):
    free, total = torch.cuda.mem_get_info()
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()} "
        f"driver_used_mb {(total - free) >> 20}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (z.view(b, t, NH, D // NH).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.tok.weight
        for n, p in self.named_parameters():
            if n.endswith("out.weight") or n.endswith("proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * L))

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


model = GPT().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
report("set-up")

for step in range(4):
    idx = torch.randint(0, V, (16, T + 1), device=dev)
    x, y = idx[:, :-1], idx[:, 1:]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, V), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    del idx, x, y, logits, loss
report("4 training steps")

model.eval()
with torch.no_grad():
    idx = torch.randint(0, V, (32, T + 1), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx[:, :-1])
    nll = F.cross_entropy(logits.float().view(-1, V), idx[:, 1:].reshape(-1))
    print(f"eval nll {nll.item():.4f}")
    del idx, logits, nll
report("no_grad evaluation")

ptr = torch.cuda.caching_allocator_alloc(64 << 20)
keep = [torch.empty(n << 20, dtype=torch.uint8, device=dev) for n in (1, 3, 24)]
torch.cuda.caching_allocator_delete(ptr)
del keep
torch.cuda.empty_cache()
report("raw scratch buffer and empty_cache")
