"""A HyenaDNA-like DNA language model written by hand, with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.

Character tokens (A, C, G, T, N and specials: vocabulary 12). Each of 8 blocks: pre-LayerNorm, a Hyena
operator of order 3 (in-projection to 4 x d, a short causal depthwise Conv1d of width 3, gating, and two long
convolutions whose filters are implicit: sinusoidal positional features of the position through an MLP with
sine activations, times an exponential decay window; the convolution is causal and runs through
torch.fft.rfft / irfft over 2L in float32, as HyenaDNA's fftconv does), an out-projection, then an MLP (GELU,
x4). d_model 256.

Phases: the first next-nucleotide training step (4 sequences of 32,768 bp, bf16 autocast, foreach AdamW,
clipping at 1.0); 2 more steps; embeddings of one 131,072 bp sequence under inference_mode (filters
recomputed for the new length) and per-position log-likelihoods; then a promoter classification fine-tune on
2,048 bp windows (batch 64, mean pooling, a linear head) with the first 4 blocks frozen and a fresh fused
Adam. 4 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2063)
if SMALL:
    D, LAYERS, SEQ, BATCH, LONG, WIN, FT_BATCH = 32, 2, 512, 2, 2048, 128, 4
else:
    D, LAYERS, SEQ, BATCH, LONG, WIN, FT_BATCH = 256, 8, 32768, 4, 131072, 2048, 64
VOCAB, EMB, FILTER_HIDDEN = 12, 33, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def fftconv(u, k, bias):
    """Causal long convolution of u (B, H, L) with k (H, L) by FFT over 2L, plus a skip term."""
    seqlen = u.shape[-1]
    fft_size = 2 * seqlen
    k_f = torch.fft.rfft(k, n=fft_size) / fft_size
    u_f = torch.fft.rfft(u.to(dtype=k.dtype), n=fft_size)
    y = torch.fft.irfft(u_f * k_f, n=fft_size, norm="forward")[..., :seqlen]
    out = y + u * bias.unsqueeze(-1)
    return out.to(dtype=u.dtype)


class Sin(nn.Module):
    def __init__(self, dim, w=10.0):
        super().__init__()
        self.freq = nn.Parameter(w * torch.ones(1, dim))

    def forward(self, x):
        return torch.sin(self.freq * x)


class PositionalEmbedding(nn.Module):
    def __init__(self, emb_dim, max_len):
        super().__init__()
        t = torch.linspace(0, 1, max_len)[None, :, None]
        bands = (emb_dim - 1) // 2
        t_rescaled = torch.linspace(0, max_len - 1, max_len)[None, :, None]
        w = 2 * math.pi * t_rescaled / max_len
        f = torch.linspace(1e-4, bands - 1, bands)[None, None]
        z = torch.exp(-1j * f * w)
        z = torch.cat([t, z.real, z.imag], dim=-1)
        self.register_buffer("z", z, persistent=False)
        self.register_buffer("t", t, persistent=False)

    def forward(self, length):
        return self.z[:, :length], self.t[:, :length]


class ExponentialModulation(nn.Module):
    def __init__(self, d, fast=0.3, slow=1.5, target=1e-2):
        super().__init__()
        max_decay = math.log(target) / fast
        min_decay = math.log(target) / slow
        self.register_buffer("deltas", torch.linspace(min_decay, max_decay, d)[None, None], persistent=False)

    def forward(self, t, x):
        return x * torch.exp(-t * self.deltas.abs())


class HyenaFilter(nn.Module):
    def __init__(self, d, order, max_len):
        super().__init__()
        self.d, self.order = d, order
        self.pos = PositionalEmbedding(EMB, max_len)
        self.mlp = nn.Sequential(
            nn.Linear(EMB, FILTER_HIDDEN),
            Sin(FILTER_HIDDEN),
            nn.Linear(FILTER_HIDDEN, FILTER_HIDDEN),
            Sin(FILTER_HIDDEN),
            nn.Linear(FILTER_HIDDEN, d * order, bias=False),
        )
        self.modulation = ExponentialModulation(d * order)
        self.bias = nn.Parameter(torch.randn(order, d))

    def forward(self, length):
        z, t = self.pos(length)
        h = self.modulation(t, self.mlp(z))  # (1, L, d * order)
        return h[0].transpose(0, 1).reshape(self.order, self.d, length)


class HyenaOperator(nn.Module):
    def __init__(self, d, max_len, order=3):
        super().__init__()
        self.order = order
        self.in_proj = nn.Linear(d, (order + 1) * d)
        self.short = nn.Conv1d((order + 1) * d, (order + 1) * d, 3, padding=2, groups=(order + 1) * d)
        self.filter = HyenaFilter(d, order - 1, max_len)
        self.out_proj = nn.Linear(d, d)

    def forward(self, u):
        length = u.shape[1]
        x = self.in_proj(u).transpose(1, 2)
        x = self.short(x)[..., :length]
        *gates, v = x.split(u.shape[-1], dim=1)
        k = self.filter(length)
        with torch.autocast("cuda", enabled=False):
            k = k.float()
            for o, g in enumerate(reversed(gates[1:])):
                v = v * g
                v = fftconv(v, k[o], self.filter.bias[o].float())
        return self.out_proj((v * gates[0]).transpose(1, 2))


class Block(nn.Module):
    def __init__(self, d, max_len):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.mixer = HyenaOperator(d, max_len)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.mixer(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class HyenaDNA(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList([Block(D, LONG) for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)
        self.lm_head.weight = self.embed.weight

    def hidden(self, ids):
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)

    def forward(self, ids):
        return self.lm_head(self.hidden(ids))


def dna(batch, length):
    return torch.randint(7, 11, (batch, length), device=device)  # A, C, G, T


model = HyenaDNA().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "filter" not in n]
no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "filter" not in n)]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=6e-4,
    betas=(0.9, 0.95),
    foreach=True,
)

model.train()
for step in range(3):
    ids = dna(BATCH, SEQ + 1)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), ids[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0:
        report("first step")
report("lm training")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    ids = dna(1, LONG)
    h = model.hidden(ids)
    logp = F.log_softmax(model.lm_head(h).float(), dim=-1)
    ll = logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    emb = h.float().mean(1).cpu()
print(f"131k embedding {tuple(emb.shape)} mean log-likelihood {ll.mean().item():.4f}")
del h, logp, ll
report("long inference")

for blk in model.blocks[: LAYERS // 2]:
    blk.requires_grad_(False)
model.embed.requires_grad_(False)
head = nn.Linear(D, 2).to(device)
del opt
ft_opt = torch.optim.Adam(
    [p for p in model.parameters() if p.requires_grad] + list(head.parameters()), lr=1e-4, fused=amp
)
model.train()
for step in range(3):
    ids = dna(FT_BATCH, WIN)
    y = torch.randint(0, 2, (FT_BATCH,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        pooled = model.hidden(ids).mean(1)
        loss = F.cross_entropy(head(pooled).float(), y)
    loss.backward()
    ft_opt.step()
    ft_opt.zero_grad(set_to_none=True)
    print(f"promoter step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
