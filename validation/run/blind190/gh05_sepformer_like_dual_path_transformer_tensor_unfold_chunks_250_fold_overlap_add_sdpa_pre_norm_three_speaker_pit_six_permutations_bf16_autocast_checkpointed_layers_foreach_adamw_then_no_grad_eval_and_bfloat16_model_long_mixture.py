"""A SepFormer-like dual-path transformer separator (Subakan et al. 2021, as in SpeechBrain) written by
hand: a Conv1d encoder of 256 filters (kernel 16, stride 8) with ReLU, a LayerNorm + 1 x 1 conv, the
frames cut into chunks of 250 with 50% overlap by Tensor.unfold (zero-padded at both ends), then 2
dual-path blocks each of an intra-chunk transformer (4 pre-norm layers, d_model 256, 8 heads with
F.scaled_dot_product_attention, feed-forward 1,024 with ReLU, dropout 0.1, sinusoidal positions added) and
an inter-chunk transformer of the same shape, each with a residual around it; a PReLU + Linear to 3
speaker masks, the chunks overlap-added back by F.fold, a gated FFN output (tanh * sigmoid) and ReLU
masks on the encoder output, and a ConvTranspose1d decoder.

Data: three-speaker 8 kHz mixtures (Libri3Mix-like) of 4 seconds at batch 8, made on the device. Loss:
permutation-invariant negative SI-SNR over all 6 speaker permutations (the pairwise matrix gathered per
permutation), the best per utterance, with SI-SNR clamped at 30 dB as SpeechBrain's threshold does.
Training under bf16 autocast with torch.utils.checkpoint (use_reentrant=False) around every transformer
layer, AdamW (foreach, lr 1.5e-4, weight decay 0.01) and gradient clipping at 5.

Phases: the first step; 3 more steps; a no_grad evaluation in eval mode at batch 8 under bf16 autocast;
then the model cast with .bfloat16() and a 20-second mixture separated under torch.inference_mode, the
estimates returned to the host in float32. 4 phases."""

import itertools
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19005)
if SMALL:
    BATCH, SEG, D, LAYERS, BLOCKS, STEPS, LONG = 2, 4000, 32, 1, 1, 1, 8000
else:
    BATCH, SEG, D, LAYERS, BLOCKS, STEPS, LONG = 8, 32000, 256, 4, 2, 3, 160000
ENC, KERNEL, STRIDE, CHUNK, HEADS, FF, N_SRC = 256, 16, 8, 250, 8, 1024, 3
EPS = 1e-8
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def sinusoids(length, dim, device):
    pos = torch.arange(length, device=device, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, dim, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / dim))
    pe = torch.zeros(length, dim, device=device)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


class TransformerLayer(nn.Module):
    def __init__(self, d, heads, ff, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ff, d))
        self.drop = nn.Dropout(dropout)
        self.p = dropout

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0)
        x = x + self.drop(self.out(a.transpose(1, 2).reshape(b, n, d)))
        return x + self.drop(self.ff(self.norm2(x)))


class TransformerStack(nn.Module):
    def __init__(self, d, layers):
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(d, HEADS, FF) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.use_checkpoint = True

    def forward(self, x):
        x = x + sinusoids(x.shape[1], x.shape[2], x.device).to(x.dtype)
        for layer in self.layers:
            if self.use_checkpoint and self.training:
                x = checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        return self.norm(x)


class DualPathBlock(nn.Module):
    def __init__(self, d, layers):
        super().__init__()
        self.intra = TransformerStack(d, layers)
        self.inter = TransformerStack(d, layers)

    def forward(self, x):
        # x: [batch, d, chunk, n_chunks]
        b, d, k, s = x.shape
        intra = x.permute(0, 3, 2, 1).reshape(b * s, k, d)
        intra = self.intra(intra).reshape(b, s, k, d).permute(0, 3, 2, 1)
        x = x + intra
        inter = x.permute(0, 2, 3, 1).reshape(b * k, s, d)
        inter = self.inter(inter).reshape(b, k, s, d).permute(0, 3, 1, 2)
        return x + inter


class SepFormer(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, ENC, KERNEL, stride=STRIDE, bias=False)
        self.norm = nn.LayerNorm(ENC)
        self.bottleneck = nn.Conv1d(ENC, D, 1, bias=False)
        self.blocks = nn.ModuleList(DualPathBlock(D, LAYERS) for _ in range(BLOCKS))
        self.prelu = nn.PReLU()
        self.to_masks = nn.Linear(D, D * N_SRC)
        self.out = nn.Conv1d(D, D, 1)
        self.gate = nn.Conv1d(D, D, 1)
        self.mask_conv = nn.Conv1d(D, ENC, 1, bias=False)
        self.decoder = nn.ConvTranspose1d(ENC, 1, KERNEL, stride=STRIDE, bias=False)

    def forward(self, wav):
        batch, samples = wav.shape
        w = F.relu(self.encoder(wav.unsqueeze(1)))  # [batch, ENC, frames]
        frames = w.shape[-1]
        y = self.bottleneck(self.norm(w.transpose(1, 2)).transpose(1, 2))
        hop = CHUNK // 2
        gap = CHUNK - (hop + frames % CHUNK) % CHUNK
        y = F.pad(y, (hop, gap + hop))
        padded = y.shape[-1]
        chunks = y.unfold(-1, CHUNK, hop).transpose(2, 3).contiguous()  # [batch, D, CHUNK, n_chunks]
        n_chunks = chunks.shape[-1]
        for block in self.blocks:
            chunks = block(chunks)
        m = self.to_masks(self.prelu(chunks).permute(0, 2, 3, 1))  # [batch, CHUNK, n_chunks, D * N_SRC]
        m = m.view(batch, CHUNK, n_chunks, N_SRC, D).permute(0, 3, 4, 1, 2)
        m = m.reshape(batch * N_SRC, D * CHUNK, n_chunks)
        m = F.fold(m, (padded, 1), kernel_size=(CHUNK, 1), stride=(hop, 1)).squeeze(-1)
        m = m[..., hop : hop + frames]
        m = torch.tanh(self.out(m)) * torch.sigmoid(self.gate(m))
        masks = F.relu(self.mask_conv(m)).view(batch, N_SRC, ENC, frames)
        est = self.decoder((w.unsqueeze(1) * masks).view(batch * N_SRC, ENC, frames))
        est = est.view(batch, N_SRC, -1)
        return F.pad(est, (0, samples - est.shape[-1]))


def si_snr(est, ref):
    est = est - est.mean(-1, keepdim=True)
    ref = ref - ref.mean(-1, keepdim=True)
    target = (est * ref).sum(-1, keepdim=True) / (ref.pow(2).sum(-1, keepdim=True) + EPS) * ref
    return 10 * torch.log10(target.pow(2).sum(-1) / ((est - target).pow(2).sum(-1) + EPS) + EPS)


PERMS = torch.tensor(list(itertools.permutations(range(N_SRC))), device=device)  # [6, 3]


def pit_loss(est, ref):
    pair = si_snr(est.unsqueeze(2), ref.unsqueeze(1))  # [batch, est, ref]
    idx = torch.arange(N_SRC, device=device)
    per_perm = pair[:, idx.expand_as(PERMS), PERMS].mean(-1)  # [batch, 6]
    best = per_perm.max(dim=1).values.clamp(max=30.0)
    return -best.mean()


def mixture(bsz, samples):
    sources = torch.randn(bsz, N_SRC, samples, device=device) * 0.1
    return sources.sum(1), sources


model = SepFormer().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = torch.optim.AdamW(model.parameters(), lr=1.5e-4, weight_decay=0.01, foreach=True)


def train_step():
    mix, ref = mixture(BATCH, SEG)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        est = model(mix)
    loss = pit_loss(est.float(), ref)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    return loss.item(), gn.item()


model.train()
loss, gn = train_step()
print(f"step 0 loss {loss:.3f} grad norm {gn:.3f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    loss, gn = train_step()
    print(f"step {step} loss {loss:.3f} grad norm {gn:.3f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    mix, ref = mixture(BATCH, SEG)
    val = pit_loss(model(mix).float(), ref)
print(f"eval loss {val.item():.3f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.bfloat16()
with torch.inference_mode():
    mix, _ = mixture(1, LONG)
    separated = model(mix.bfloat16()).float().cpu()
print(f"separated {tuple(separated.shape)} rms {separated.pow(2).mean().sqrt():.4f}")
if device == "cuda":
    print(
        f"long allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
