"""A Hyena language model as HazyResearch's safari writes its HyenaOperator (order 2): an input
projection to 3 x 768 channels, a short causal depthwise Conv1d of width 3 over them, an implicit
long filter per channel produced by a small MLP with Sin activations over a complex-exponential
positional embedding (33 features) and multiplied by an exponential-decay modulation, and the long
convolution `fftconv` by torch.fft.rfft/irfft over fft_size = 2L (both operands upcast to fp32,
irfft with norm="forward", a bias skip term), gated twice by elementwise products; pre-norm blocks
with a GELU MLP of 4x, 8 layers, vocabulary 50,304, tied embedding. fp32 weights under bf16
autocast, fused AdamW, two micro-batches of 4 x 2,048 accumulated a step, gradient clipping at 1.0,
3 steps (the first its own phase), then a perplexity evaluation at a longer context (2 x 8,192)
under no_grad with the filters regenerated for that length; 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15602)
if SMALL:
    V, D, LAYERS, B, T, EVAL_B, EVAL_T, STEPS, ACCUM = 256, 32, 2, 2, 64, 1, 128, 3, 2
else:
    V, D, LAYERS, B, T, EVAL_B, EVAL_T, STEPS, ACCUM = 50304, 768, 8, 4, 2048, 2, 8192, 3, 2
EMB_DIM, FILTER_ORDER = 33, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")


def fftconv(u, k, D):
    seqlen = u.shape[-1]
    fft_size = 2 * seqlen
    k_f = torch.fft.rfft(k.float(), n=fft_size) / fft_size
    u_f = torch.fft.rfft(u.float(), n=fft_size)
    y = torch.fft.irfft(u_f * k_f, n=fft_size, norm="forward")[..., :seqlen]
    out = y + u * D.unsqueeze(-1)
    return out.to(dtype=u.dtype)


class Sin(nn.Module):
    def __init__(self, dim, w=10):
        super().__init__()
        self.freq = nn.Parameter(w * torch.ones(1, dim))

    def forward(self, x):
        return torch.sin(self.freq * x)


class PositionalEmbedding(nn.Module):
    def __init__(self, emb_dim, seq_len):
        super().__init__()
        self.seq_len = seq_len
        t = torch.linspace(0, 1, self.seq_len)[None, :, None]  # 1, L, 1
        bands = (emb_dim - 1) // 2
        t_rescaled = torch.linspace(0, seq_len - 1, seq_len)[None, :, None]
        w = 2 * math.pi * t_rescaled / seq_len
        f = torch.linspace(1e-4, bands - 1, bands)[None, None]
        z = torch.exp(-1j * f * w)
        z = torch.cat([t, z.real, z.imag], dim=-1)
        self.register_buffer("z", z)
        self.register_buffer("t", t)

    def forward(self, L):
        return self.z[:, :L], self.t[:, :L]


class ExponentialModulation(nn.Module):
    def __init__(self, d_model, fast_decay_pct=0.3, slow_decay_pct=1.5, target=1e-2, shift=0.0):
        super().__init__()
        self.shift = shift
        max_decay = math.log(target) / fast_decay_pct
        min_decay = math.log(target) / slow_decay_pct
        self.register_buffer("deltas", torch.linspace(min_decay, max_decay, d_model)[None, None])

    def forward(self, t, x):
        decay = torch.exp(-t * self.deltas.abs())
        return x * (decay + self.shift)


class HyenaFilter(nn.Module):
    def __init__(self, d_model, emb_dim, order, seq_len):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(d_model))
        self.pos_emb = PositionalEmbedding(emb_dim, seq_len)
        self.implicit_filter = nn.Sequential(
            nn.Linear(emb_dim, order),
            Sin(order),
            nn.Linear(order, order),
            Sin(order),
            nn.Linear(order, order),
            Sin(order),
            nn.Linear(order, d_model, bias=False),
        )
        self.modulation = ExponentialModulation(d_model)

    def filter(self, L):
        z, t = self.pos_emb(L)
        h = self.implicit_filter(z)
        return self.modulation(t, h)  # 1, L, D


class HyenaOperator(nn.Module):
    def __init__(self, d_model, l_max, order=2):
        super().__init__()
        self.d_model, self.order = d_model, order
        inner = d_model * (order + 1)
        self.in_proj = nn.Linear(d_model, inner)
        self.out_proj = nn.Linear(d_model, d_model)
        self.short_filter = nn.Conv1d(inner, inner, 3, padding=2, groups=inner)
        self.filter_fn = HyenaFilter(d_model * (order - 1), EMB_DIM, FILTER_ORDER, l_max)

    def forward(self, u):
        L = u.size(-2)
        u = self.in_proj(u).transpose(1, 2)  # B, 3D, L
        uc = self.short_filter(u)[..., :L]
        *x, v = uc.split(self.d_model, dim=1)
        k = self.filter_fn.filter(L)[0].transpose(0, 1)  # D, L
        k = k.view(self.order - 1, self.d_model, L)
        bias = self.filter_fn.bias.view(self.order - 1, self.d_model)
        for o, x_i in enumerate(reversed(x[1:])):
            v = v * x_i
            v = fftconv(v, k[o], bias[o])
        y = (v * x[0]).transpose(1, 2)
        return self.out_proj(y)


class Block(nn.Module):
    def __init__(self, l_max):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.mixer = HyenaOperator(D, l_max)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(approximate="tanh"), nn.Linear(4 * D, D))

    def forward(self, x):
        x = x + self.mixer(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class HyenaLM(nn.Module):
    def __init__(self, l_max):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block(l_max) for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


model = HyenaLM(EVAL_T).to(device)
opt = torch.optim.AdamW(
    model.parameters(), lr=6e-4, betas=(0.9, 0.98), weight_decay=0.1, fused=device == "cuda"
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    for micro in range(ACCUM):
        ids = torch.randint(0, V, (B, T + 1), device=device)
        with torch.autocast(**amp):
            logits = model(ids[:, :-1])
            loss = F.cross_entropy(logits.float().view(-1, V), ids[:, 1:].reshape(-1)) / ACCUM
        loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda" and step != 1:
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item() * ACCUM:.4f} norm {norm.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del logits, loss, ids
model.eval()
with torch.no_grad(), torch.autocast(**amp):
    ids = torch.randint(0, V, (EVAL_B, EVAL_T + 1), device=device)
    logits = model(ids[:, :-1])
    nll = F.cross_entropy(logits.float().view(-1, V), ids[:, 1:].reshape(-1))
    ppl = math.exp(nll.item())
if device == "cuda":
    print(
        f"eval ppl {ppl:.1f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
