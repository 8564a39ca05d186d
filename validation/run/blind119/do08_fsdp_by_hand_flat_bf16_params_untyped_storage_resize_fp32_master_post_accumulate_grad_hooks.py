"""FSDP's parameter handling written by hand on one GPU: each of 16 transformer blocks (width 2048,
16 heads, MLP 8,192) keeps an fp32 master copy of its parameters as one flat tensor, and its bf16
parameters are views into one flat bf16 buffer whose storage is freed with
untyped_storage().resize_(0) after the block's forward and refilled (resize_ back to full, copy_
from the master) by a forward pre-hook and a full backward pre-hook; post-accumulate-grad hooks cast
each block's bf16 gradients into the master's fp32 gradient and free the storage again; embedding,
final norm and head stay fp32; AdamW (foreach) over the masters, batch 8 x 1,024, 3 steps, then a
no_grad evaluation through the same hooks; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11908)
LAYERS, D, H, FF, V = (2, 128, 4, 512, 1000) if SMALL else (16, 2048, 16, 8192, 32000)
B, T = (2, 64) if SMALL else (8, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, FF, bias=False)
        self.out = nn.Linear(FF, D, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(b, n, H, D // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class FlatParams:
    """One block's parameters as bf16 views of a flat buffer, backed by an fp32 master."""

    def __init__(self, block):
        self.params = list(block.parameters())
        self.numel = sum(p.numel() for p in self.params)
        self.master = nn.Parameter(torch.cat([p.detach().reshape(-1).float() for p in self.params]))
        self.flat = torch.empty(self.numel, dtype=torch.bfloat16, device=device)
        offset = 0
        for p in self.params:
            p.data = self.flat[offset : offset + p.numel()].view(p.shape)
            offset += p.numel()
            p.register_post_accumulate_grad_hook(self.grad_ready)
        self.pending = 0
        self.reshard()
        block.register_forward_pre_hook(lambda m, args: self.unshard())
        block.register_forward_hook(lambda m, args, out: self.reshard())
        block.register_full_backward_pre_hook(lambda m, grad_out: self.unshard())

    def unshard(self):
        storage = self.flat.untyped_storage()
        if storage.size() == 0:
            storage.resize_(self.numel * self.flat.element_size())
            with torch.no_grad():
                self.flat.copy_(self.master)

    def reshard(self):
        self.flat.untyped_storage().resize_(0)

    def grad_ready(self, p):
        self.pending += 1
        if self.pending < len(self.params):
            return
        self.pending = 0
        with torch.no_grad():
            g = torch.cat([q.grad.reshape(-1).float() for q in self.params])
            self.master.grad = g if self.master.grad is None else self.master.grad.add_(g)
        for q in self.params:
            q.grad = None
        self.reshard()


embed = nn.Embedding(V, D).to(device)
blocks = nn.ModuleList(Block() for _ in range(LAYERS)).to(device)
head = nn.Sequential(nn.LayerNorm(D), nn.Linear(D, V, bias=False)).to(device)
flats = [FlatParams(b) for b in blocks]
masters = [f.master for f in flats]
optimizer = torch.optim.AdamW(
    [*masters, *embed.parameters(), *head.parameters()], lr=2e-4, weight_decay=0.1, foreach=True
)


def forward(ids):
    x = embed(ids).to(torch.bfloat16)
    for blk in blocks:
        x = blk(x)
    return head(x.float())


def report(what):
    if device == "cuda":
        print(
            f"{what} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


report("masters")
for step in range(3):
    ids = torch.randint(0, V, (B, T + 1), device=device)
    loss = F.cross_entropy(forward(ids[:, :-1]).view(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    report(f"step {step} loss {loss.item():.3f}")
with torch.no_grad():
    ids = torch.randint(0, V, (B, T), device=device)
    nll = F.cross_entropy(forward(ids[:, :-1]).reshape(-1, V), ids[:, 1:].reshape(-1))
report(f"eval nll {nll.item():.3f}")
