"""An x-transformers-style decoder written by hand (lucidrains' layout): token embedding, 8 pre-norm layers of
768 wide with `RMSNorm` (scale by sqrt(dim), learned gamma), 12 heads of 64, partial rotary embeddings on the
first 32 dims of each head (`RotaryEmbedding` recomputing `einsum('i,j->ij', t, inv_freq)` per forward,
`rotate_half` by view/unbind/stack), `attn_flash` SDPA with `is_causal`, GLU feed-forward (GELU gate, mult 4),
and a final norm + logits. Layer 6 is a Memorizing-Transformers kNN layer: each query (every head and token,
fp32) is compared with `torch.cdist` to the keys of a memory of 8192 past keys and values kept in a CUDA ring
buffer (head-averaged keys of earlier batches written with `index_copy_` at a moving pointer), the 16 nearest
are taken by `topk(largest=False)` under `no_grad`, gathered, attended, and mixed with the local attention
output through a learned per-head sigmoid gate.

Phases: 0 model, AdamW (foreach) and the empty memory; 1 three training steps at 4 x 1024 under bf16 autocast,
the memory filled after each step; 2 evaluation at 8 x 1024 under `no_grad` (cdist of 98,304 queries against
the full memory); 3 one training step at 2 x 2048 (longer context, rotary positions beyond the trained
length)."""

import os

import torch
import torch.nn.functional as F
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(404)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    VOCAB, DIM, DEPTH, HEADS, DIM_HEAD, MEM, KNN_K, KNN_LAYER = 256, 64, 2, 4, 16, 64, 4, 1
    B, T, EVAL_B, LONG_B, LONG_T = 2, 32, 2, 1, 64
else:
    VOCAB, DIM, DEPTH, HEADS, DIM_HEAD, MEM, KNN_K, KNN_LAYER = 20000, 768, 8, 12, 64, 8192, 16, 5
    B, T, EVAL_B, LONG_B, LONG_T = 4, 1024, 8, 2, 2048
ROT_DIM = max(DIM_HEAD // 2, 32) if not SMALL else 8


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
            f"memory_allocated {torch.cuda.memory_allocated()} "
            f"max_memory_reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(tag)


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = dim**0.5
        self.g = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.normalize(x, dim=-1) * self.scale * self.g


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, seq_len):
        t = torch.arange(seq_len, device=self.inv_freq.device).type_as(self.inv_freq)
        freqs = torch.einsum("i,j->ij", t, self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1)


def rotate_half(x):
    x = x.view(*x.shape[:-1], -1, 2)
    x1, x2 = x.unbind(dim=-1)
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary_pos_emb(t, freqs):
    rot_dim = freqs.shape[-1]
    t, t_unrotated = t[..., :rot_dim], t[..., rot_dim:]
    t = (t * freqs.cos()) + (rotate_half(t) * freqs.sin())
    return torch.cat((t, t_unrotated), dim=-1)


class Memory:
    """A ring buffer of past (key, value) pairs on the device."""

    def __init__(self, size, dim):
        self.keys = torch.zeros(size, dim, device=device)
        self.values = torch.zeros(size, dim, device=device)
        self.ptr, self.filled, self.size = 0, 0, size

    @torch.no_grad()
    def add(self, k, v):
        n = min(k.shape[0], self.size)
        pos = (torch.arange(n, device=device) + self.ptr) % self.size
        self.keys.index_copy_(0, pos, k[-n:].float())
        self.values.index_copy_(0, pos, v[-n:].float())
        self.ptr = (self.ptr + n) % self.size
        self.filled = min(self.filled + n, self.size)


class Attention(nn.Module):
    def __init__(self, knn=False):
        super().__init__()
        inner = HEADS * DIM_HEAD
        self.to_q = nn.Linear(DIM, inner, bias=False)
        self.to_k = nn.Linear(DIM, inner, bias=False)
        self.to_v = nn.Linear(DIM, inner, bias=False)
        self.to_out = nn.Linear(inner, DIM, bias=False)
        self.knn = knn
        if knn:
            self.gate = nn.Parameter(torch.zeros(HEADS, 1, 1))

    def forward(self, x, freqs, memory=None):
        b, n, _ = x.shape
        q, k, v = (
            f(x).view(b, n, HEADS, DIM_HEAD).transpose(1, 2) for f in (self.to_q, self.to_k, self.to_v)
        )
        q, k = apply_rotary_pos_emb(q, freqs), apply_rotary_pos_emb(k, freqs)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if self.knn:
            if memory.filled > 0:
                flat_q = q.float().reshape(-1, DIM_HEAD)
                with torch.no_grad():
                    keys = memory.keys[: memory.filled]
                    dist = torch.cdist(flat_q.detach(), keys)
                    idx = dist.topk(KNN_K, dim=-1, largest=False).indices
                    del dist
                mk, mv = memory.keys[idx], memory.values[idx]
                sim = torch.einsum("nd,nkd->nk", flat_q, mk) * DIM_HEAD**-0.5
                mem_out = torch.einsum("nk,nkd->nd", sim.softmax(dim=-1), mv).view(b, HEADS, n, DIM_HEAD)
                g = self.gate.sigmoid()
                out = out * g + mem_out.to(out.dtype) * (1 - g)
            self.last_kv = (
                k.detach().mean(1).reshape(-1, DIM_HEAD),
                v.detach().mean(1).reshape(-1, DIM_HEAD),
            )
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class GLUFeedForward(nn.Module):
    def __init__(self, mult=4):
        super().__init__()
        inner = DIM * mult
        self.proj_in = nn.Linear(DIM, inner * 2)
        self.proj_out = nn.Linear(inner, DIM)

    def forward(self, x):
        x, gate = self.proj_in(x).chunk(2, dim=-1)
        return self.proj_out(x * F.gelu(gate))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.token_emb = nn.Embedding(VOCAB, DIM)
        self.rotary = RotaryEmbedding(ROT_DIM)
        self.layers = nn.ModuleList()
        for i in range(DEPTH):
            self.layers.append(
                nn.ModuleList([RMSNorm(DIM), Attention(knn=i == KNN_LAYER), RMSNorm(DIM), GLUFeedForward()])
            )
        self.norm = RMSNorm(DIM)
        self.to_logits = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids, memory):
        x = self.token_emb(ids)
        freqs = self.rotary(ids.shape[1])
        for norm1, attn, norm2, ff in self.layers:
            x = x + attn(norm1(x), freqs, memory)
            x = x + ff(norm2(x))
        return self.to_logits(self.norm(x))


model = Decoder().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.99), weight_decay=0.01)
memory = Memory(MEM, DIM_HEAD)
knn_attn = model.layers[KNN_LAYER][1]
print(f"parameters {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
report("model, AdamW and empty kNN memory")


def train_step(bs, seq):
    ids = torch.randint(0, VOCAB, (bs, seq + 1), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(ids[:, :-1], memory)
    loss = F.cross_entropy(logits.float().transpose(1, 2), ids[:, 1:])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    opt.zero_grad(set_to_none=True)
    memory.add(*knn_attn.last_kv)
    return loss.item()


for step in range(3):
    print(f"step {step} loss {train_step(B, T):.4f} memory {memory.filled}")
report("training with kNN memory")

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    ids = torch.randint(0, VOCAB, (EVAL_B, T + 1), device=device)
    logits = model(ids[:, :-1], memory)
    val = F.cross_entropy(logits.float().transpose(1, 2), ids[:, 1:])
print(f"eval loss {val.item():.4f}")
del logits
report("evaluation under no_grad")

model.train()
print(f"long step loss {train_step(LONG_B, LONG_T):.4f} memory {memory.filled}")
report("longer context step")
