"""Attention variants and per-sample gradients: SDPA with `enable_gqa=True` (32 query heads over 8 key/value
heads, not repeated by hand) in a 4-layer decoder trained under bf16 autocast with AdamW (foreach); then
FlexAttention called eagerly (no torch.compile) with a causal sliding-window `create_block_mask` on fp32
inputs under no_grad; then per-sample gradients of a small MLP classifier with `torch.func.vmap(grad(...))`
over `functional_call`, in fp32, at 256 samples.

Phases: the GQA decoder's 3 training steps at batch 8 x 2048 (d 2048, head dim 64, MLP 5632 SwiGLU);
eager flex_attention at batch 4, 16 heads, 1024 tokens, head dim 64, window 256; per-sample gradients of
a 784-1024-1024-10 MLP, twice. No value-dependent sizes. 3 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

torch.manual_seed(2333)
device = "cuda"
D, HQ, HKV, HD, FF, L, V = 2048, 32, 8, 64, 5632, 4, 32000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.q = nn.Linear(D, HQ * HD, bias=False)
        self.kv = nn.Linear(D, 2 * HKV * HD, bias=False)
        self.o = nn.Linear(HQ * HD, D, bias=False)
        self.gate_up = nn.Linear(D, 2 * FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, t, HQ, HD).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, HKV, HD).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, HQ * HD))
        g, u = self.gate_up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


model = Decoder().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
for step in range(3):
    idx = torch.randint(0, V, (8, 2048), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(idx).flatten(0, 1).float(), idx.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("gqa step", step, loss.item())
del loss
report("gqa decoder bf16 train")

del model, opt
torch.cuda.empty_cache()


def window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 256)


mask = create_block_mask(window, None, None, 1024, 1024, device=device)
q, k, v = (torch.randn(4, 16, 1024, 64, device=device) for _ in range(3))
with torch.no_grad():
    out = flex_attention(q, k, v, block_mask=mask)
    print("flex", tuple(out.shape), out.abs().mean().item())
del out, q, k, v, mask
report("flex attention eager")

mlp = nn.Sequential(
    nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
).to(device)
params = {n: p.detach() for n, p in mlp.named_parameters()}


def loss_one(p, x, y):
    logits = functional_call(mlp, p, (x.unsqueeze(0),))
    return F.cross_entropy(logits, y.unsqueeze(0))


per_sample = vmap(grad(loss_one), in_dims=(None, 0, 0))
for _ in range(2):
    x = torch.randn(256, 784, device=device)
    y = torch.randint(0, 10, (256,), device=device)
    grads = per_sample(params, x, y)
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()]).norm(dim=0)
    print("per-sample grad norms", tuple(norms.shape), norms.mean().item())
    del grads, norms
report("per-sample gradients vmap grad")
