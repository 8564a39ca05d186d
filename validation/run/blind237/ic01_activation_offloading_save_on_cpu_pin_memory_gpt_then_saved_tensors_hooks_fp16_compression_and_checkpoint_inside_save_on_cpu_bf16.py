"""Activation memory tricks through autograd's saved-tensor hooks, on a 6-layer GPT (d 1024, 16 heads
through SDPA, MLP 4096, vocab 32000) at batch 8 x 1024:
`torch.autograd.graph.save_on_cpu(pin_memory=True)` around the forward (every saved activation copied to
pinned host memory and back for backward); custom `saved_tensors_hooks` that pack each saved float32
tensor of two or more dimensions to float16 on the GPU and unpack it to float32; and non-reentrant
activation checkpointing per block inside `save_on_cpu`. fp32 weights, AdamW (foreach), one step each,
then a bf16-autocast step with plain autograd for comparison.

No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2371)
V, D, H, L, T, B = 32000, 1024, 16, 6, 1024, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        x = x + self.o(
            F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D)
        )
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx, ckpt=False):
        x = self.emb(idx)
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False) if ckpt else blk(x)
        return self.head(x)


model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)


def step(tag, ckpt=False, ctx=None, autocast=False):
    idx = torch.randint(0, V, (B, T), device="cuda")
    with ctx if ctx is not None else torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = F.cross_entropy(model(idx, ckpt).flatten(0, 1).float(), idx.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(tag, loss.item())
    report(tag)


def pack(t):
    if t.dtype == torch.float32 and t.dim() >= 2:
        return ("half", t.half())
    return ("keep", t)


def unpack(p):
    kind, t = p
    return t.float() if kind == "half" else t


step("save_on_cpu pinned", ctx=torch.autograd.graph.save_on_cpu(pin_memory=True))
step("fp16 pack hooks", ctx=torch.autograd.graph.saved_tensors_hooks(pack, unpack))
step("checkpoint inside save_on_cpu", ckpt=True, ctx=torch.autograd.graph.save_on_cpu(pin_memory=True))
step("bf16 autocast plain", autocast=True)
