"""Many LoRA adapters on one frozen base model at once (Punica / S-LoRA style): a hand-written Llama-like
decoder (8 layers, width 2048, 16 query heads over 4 key/value heads through
`F.scaled_dot_product_attention(..., enable_gqa=True)`, RMSNorm, SwiGLU 5632, vocabulary 32000) in pure
bf16, with 8 rank-16 adapters on q, k, v and o stored as stacked (8, d_in, 16) and (8, 16, d_out)
tensors. Sequences are sorted by adapter on the host, so each adapter's rows are contiguous; the
adapters' row counts' cumsum (int32) is `offs`, and every LoRA delta is two grouped GEMMs:
`F.grouped_mm(F.grouped_mm(x, A, offs=offs), B, offs=offs)` (shrink then expand; its backward is
the 2d x 2d grouped GEMM for the adapters' gradients).

Phases: 0 base model, adapters and AdamW (foreach) over the adapters only; 1 three steps training all
8 adapters together on 16 sequences of 512 (uneven sequences per adapter) with
`torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False`, causal attention
(`is_causal=True`); 2 serving: a prefill of 32 left-padded prompts (lengths 96 to 384) from all
8 adapters under inference_mode, attention with a boolean (B, 1, S, S) causal-and-padding mask, the
keys and values written into a preallocated static cache; 3 32 greedy decode steps, one token per
request, each step's LoRA deltas again grouped by adapter, attention over the cache prefix with a
(B, 1, 1, n) padding mask."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(3373)
gen = torch.Generator().manual_seed(3373)
dev = "cuda"
D, L, HQ, HKV, FF, V, NA, R = 2048, 8, 16, 4, 5632, 32000, 8, 16
DH = D // HQ
B_TRAIN, S_TRAIN, B_SERVE, S_MAX, NEW, STEPS = 16, 512, 32, 384, 32, 3
dt = torch.bfloat16


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class MultiLoRALinear(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.base = nn.Linear(d_in, d_out, bias=False)
        self.base.weight.requires_grad_(False)
        self.A = nn.Parameter(torch.randn(NA, d_in, R) / d_in**0.5)
        self.B = nn.Parameter(torch.zeros(NA, R, d_out))

    def forward(self, x, offs):
        flat = x.reshape(-1, x.shape[-1])
        delta = F.grouped_mm(F.grouped_mm(flat, self.A, offs=offs), self.B, offs=offs)
        return self.base(x) + 2.0 * delta.view(*x.shape[:-1], -1)


def rope(x, pos):
    inv = 1.0 / (10000 ** (torch.arange(0, DH, 2, device=dev, dtype=torch.float32) / DH))
    ang = pos[..., None].float() * inv
    cos, sin = ang.cos().to(x.dtype)[:, None], ang.sin().to(x.dtype)[:, None]
    x1, x2 = x[..., : DH // 2], x[..., DH // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.q, self.o = MultiLoRALinear(D, D), MultiLoRALinear(D, D)
        self.k, self.v = MultiLoRALinear(D, HKV * DH), MultiLoRALinear(D, HKV * DH)
        self.gate = nn.Linear(D, FF, bias=False)
        self.up = nn.Linear(D, FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def forward(self, x, offs, pos, mask=None, cache=None, at=None):
        b, s, _ = x.shape
        h = self.n1(x)
        q = rope(self.q(h, offs).view(b, s, HQ, DH).transpose(1, 2), pos)
        k = rope(self.k(h, offs).view(b, s, HKV, DH).transpose(1, 2), pos)
        v = self.v(h, offs).view(b, s, HKV, DH).transpose(1, 2)
        if cache is not None:
            cache[0][:, :, at : at + s] = k
            cache[1][:, :, at : at + s] = v
            k, v = cache[0][:, :, : at + s], cache[1][:, :, : at + s]
        if mask is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, D), offs)
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.emb.weight.requires_grad_(False)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight.requires_grad_(False)

    def forward(self, ids, offs, pos, mask=None, caches=None, at=None):
        x = self.emb(ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, offs, pos, mask, None if caches is None else caches[i], at)
        return self.lm_head(self.norm(x))


def adapter_groups(n):
    counts = torch.ones(NA, dtype=torch.long) + torch.bincount(
        torch.randint(0, NA, (n - NA,), generator=gen), minlength=NA
    )
    return counts, torch.repeat_interleave(torch.arange(NA), counts)


model = Model().to(dev, dt)
adapters = [p for n, p in model.named_parameters() if n.endswith((".A", ".B"))]
opt = torch.optim.AdamW(adapters, lr=1e-4, weight_decay=0.0, foreach=True)
print("adapter params", sum(p.numel() for p in adapters))
report("base model, stacked adapters, optimizer")

torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
counts, _ = adapter_groups(B_TRAIN)
offs = (counts * S_TRAIN).cumsum(0).to(torch.int32).to(dev)
pos = torch.arange(S_TRAIN, device=dev)[None].expand(B_TRAIN, -1)
for step in range(STEPS):
    ids = torch.randint(0, V, (B_TRAIN, S_TRAIN + 1), device=dev)
    logits = model(ids[:, :-1], offs, pos)
    loss = F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
del logits, loss
report("multi-adapter grouped_mm training")

counts, request_adapter = adapter_groups(B_SERVE)
lengths = torch.randint(96, S_MAX + 1, (B_SERVE,), generator=gen).to(dev)
serve_offs = (counts * S_MAX).cumsum(0).to(torch.int32).to(dev)
step_offs = counts.cumsum(0).to(torch.int32).to(dev)
valid = torch.arange(S_MAX, device=dev)[None, :] >= (S_MAX - lengths)[:, None]
mask = valid[:, None, None, :] & torch.ones(S_MAX, S_MAX, dtype=torch.bool, device=dev).tril()
mask = mask | torch.eye(S_MAX, dtype=torch.bool, device=dev)
pos = (valid.long().cumsum(1) - 1).clamp(min=0)
caches = [
    (
        torch.zeros(B_SERVE, HKV, S_MAX + NEW, DH, device=dev, dtype=dt),
        torch.zeros(B_SERVE, HKV, S_MAX + NEW, DH, device=dev, dtype=dt),
    )
    for _ in range(L)
]
with torch.inference_mode():
    prompts = torch.randint(0, V, (B_SERVE, S_MAX), device=dev)
    logits = model(prompts, serve_offs, pos, mask, caches, 0)
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    del logits
print("prefill requests per adapter", counts.tolist(), "first", request_adapter[:4].tolist())
report("mixed-adapter prefill static cache")

out = [nxt]
with torch.inference_mode():
    seen = valid
    for t in range(NEW - 1):
        seen = torch.cat([seen, torch.ones(B_SERVE, 1, dtype=torch.bool, device=dev)], dim=1)
        p = pos[:, -1:] + t + 1
        logits = model(nxt, step_offs, p, seen[:, None, None, :], caches, S_MAX + t)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out.append(nxt)
print("decoded", tuple(torch.cat(out, 1).shape))
report("grouped_mm lora decode")
