"""A GPT-style decoder trained with PyTorch's other CUDA allocator backend: the script sets
`PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync` before it imports torch, so every tensor comes from
CUDA's stream-ordered pool (cudaMallocAsync / cudaFreeAsync on the device's default memory pool) instead
of the caching allocator's segments and blocks; `torch.cuda.memory_allocated()` and
`memory_reserved()` then read the pool's used and reserved memory (cudaMemPoolAttrUsedMemCurrent /
ReservedMemCurrent), their maxima the pool's high-water marks, and `empty_cache()` trims the pool
(cudaMemPoolTrimTo). The decoder: 12 layers, d_model 1024, 16 heads, SwiGLU MLP 2816, RMSNorm,
tied 32,000-token embedding, causal SDPA; fp32 weights, bf16 autocast, foreach AdamW with weight decay
on matrices only, gradient clipping. Training walks a fixed schedule of sequence-length buckets
(batch x length: 16x512, 8x1024, 4x2048, 16x768, 32x256, 8x1024) so blocks of many sizes are freed and
reused across steps. Phase 1: model and optimizer. Phase 2: 6 training steps over the buckets.
Phase 3: `empty_cache()` after dropping the last step's tensors. Phase 4: no_grad batched scoring
(per-token log-likelihood of 64 sequences of 512 tokens, in chunks of 16). Seeded; no value-dependent
sizes."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2801)
dev = "cuda"
V, D, L, H, FF = 32000, 1024, 12, 16, 2816


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.n2 = nn.RMSNorm(D)
        self.gate_up = nn.Linear(D, 2 * FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        g, u = self.gate_up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(D)

    def forward(self, idx):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x)
        return F.linear(self.norm(x), self.emb.weight)


model = GPT().to(dev)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-4,
    betas=(0.9, 0.95),
    foreach=True,
)
print("backend", torch.cuda.get_allocator_backend())
report("model")

buckets = [(16, 512), (8, 1024), (4, 2048), (16, 768), (32, 256), (8, 1024)]
for step, (b, t) in enumerate(buckets):
    idx = torch.randint(0, V, (b, t + 1), device=dev)
    with torch.autocast("cuda", torch.bfloat16):
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, V), idx[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} {b}x{t} loss {loss.item():.3f}")
report("train")

del idx, logits, loss
torch.cuda.empty_cache()
report("trim")

model.eval()
seqs = torch.randint(0, V, (64, 513), device=dev)
scores = torch.empty(64, device=dev)
with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
    for i in range(0, 64, 16):
        chunk = seqs[i : i + 16]
        logp = torch.log_softmax(model(chunk[:, :-1]).float(), -1)
        scores[i : i + 16] = logp.gather(-1, chunk[:, 1:, None]).squeeze(-1).mean(1)
print("mean score", scores.mean().item())
report("end")
