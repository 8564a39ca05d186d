"""A Conformer-S CTC recogniser by hand after Gulati et al. 2020 (and the ESPnet / NeMo layouts):
the front end on the GPU per batch: seeded 16 kHz noise, torch.stft (n_fft 512, win 400 hann, hop 160,
center, reflect), power spectrum, an 80-band Slaney-style mel filterbank built in torch and applied by
matmul, log(x + 1e-6), per-utterance normalisation; SpecAugment by fixed random spans (2 frequency
masks of up to 27 bands and 10 time masks of up to 5% of the frames, their starts and widths drawn
from a seeded CPU generator and written by slice assignment, per utterance); a Conv2d subsampling by 4
(two 3 x 3 stride-2 convolutions of 144 channels with ReLU, then a Linear to 144); 16 Conformer
blocks of width 144 (macaron half-step feed-forward modules of 576 with SiLU, multi-head
self-attention of 4 heads by F.scaled_dot_product_attention with the key padding mask as a boolean
attn_mask, the convolution module: pointwise Conv1d to 288, GLU, depthwise Conv1d of kernel 31,
BatchNorm1d, SiLU, pointwise Conv1d; final LayerNorm); a Linear to a 256-token vocabulary and
F.ctc_loss over the fp32 log_softmax (padded targets, per-utterance input and target lengths). bf16
autocast, AdamW (lr 5e-4 peak, weight decay 1e-3) with the Noam schedule (LambdaLR), clip_grad_norm_
at 5; batch 32 of 8 to 16 s; 4 steps (the first its own phase); then greedy CTC evaluation of 64
utterances at batch 32 under no_grad; then long-form encoding of 4 utterances of 60 s under
inference_mode and bf16 autocast; 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16804)
if SMALL:
    B, SEC_MIN, SEC_MAX, D, LAYERS, HEADS, VOCAB, STEPS, EVAL_N, LONG_B, LONG_SEC = (
        2,
        1.0,
        2.0,
        32,
        2,
        4,
        16,
        2,
        4,
        2,
        3.0,
    )
else:
    B, SEC_MIN, SEC_MAX, D, LAYERS, HEADS, VOCAB, STEPS, EVAL_N, LONG_B, LONG_SEC = (
        32,
        8.0,
        16.0,
        144,
        16,
        4,
        256,
        4,
        64,
        4,
        60.0,
    )
N_MELS, N_FFT, HOP, WIN = 80, 512, 160, 400
device = "cuda" if torch.cuda.is_available() else "cpu"


def slaney_mel_filterbank(n_mels, n_fft, sr=16000.0):
    def hz_to_mel(f):
        f = torch.as_tensor(f, dtype=torch.float64)
        lin = f / (200.0 / 3)
        log = 15.0 + torch.log(torch.clamp(f, min=1e-10) / 1000.0) / (math.log(6.4) / 27.0)
        return torch.where(f >= 1000.0, log, lin)

    def mel_to_hz(m):
        lin = m * (200.0 / 3)
        log = 1000.0 * torch.exp((m - 15.0) * (math.log(6.4) / 27.0))
        return torch.where(m >= 15.0, log, lin)

    freqs = torch.linspace(0, sr / 2, n_fft // 2 + 1, dtype=torch.float64)
    mel_pts = torch.linspace(float(hz_to_mel(0.0)), float(hz_to_mel(sr / 2)), n_mels + 2, dtype=torch.float64)
    hz_pts = mel_to_hz(mel_pts)
    fdiff = hz_pts[1:] - hz_pts[:-1]
    ramps = hz_pts[:, None] - freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = torch.clamp(torch.minimum(lower, upper), min=0.0)
    enorm = 2.0 / (hz_pts[2 : n_mels + 2] - hz_pts[:n_mels])
    return (weights * enorm[:, None]).float()  # (n_mels, n_fft // 2 + 1)


class LogMel(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(WIN))
        self.register_buffer("fb", slaney_mel_filterbank(N_MELS, N_FFT))

    def forward(self, wave, lengths):
        spec = torch.stft(
            wave, N_FFT, HOP, WIN, window=self.window, center=True, pad_mode="reflect", return_complex=True
        )
        power = spec.real.pow(2) + spec.imag.pow(2)  # (B, 257, T)
        mel = torch.matmul(self.fb, power)  # (B, 80, T)
        feats = torch.log(mel + 1e-6)
        frames = lengths // HOP + 1
        valid = torch.arange(feats.shape[-1], device=feats.device)[None, :] < frames[:, None]
        v = valid[:, None, :].float()
        mean = (feats * v).sum(-1, keepdim=True) / v.sum(-1, keepdim=True)
        std = (((feats - mean) * v) ** 2).sum(-1, keepdim=True).div(v.sum(-1, keepdim=True)).sqrt()
        return ((feats - mean) / (std + 1e-5)) * v, frames


def spec_augment(feats, frames, gen):
    feats = feats.clone()
    for b in range(feats.shape[0]):
        t_len = int(frames[b])
        for _ in range(2):
            f = int(torch.randint(0, 28, (1,), generator=gen))
            f0 = int(torch.randint(0, N_MELS - f + 1, (1,), generator=gen))
            feats[b, f0 : f0 + f, :] = 0.0
        max_t = max(1, int(0.05 * t_len))
        for _ in range(10):
            t = int(torch.randint(0, max_t + 1, (1,), generator=gen))
            t0 = int(torch.randint(0, max(1, t_len - t), (1,), generator=gen))
            feats[b, :, t0 : t0 + t] = 0.0
    return feats


class Conv2dSubsampling(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2), nn.ReLU())
        self.out = nn.Linear(d * (((N_MELS - 1) // 2 - 1) // 2), d)

    def forward(self, x, frames):  # x (B, 80, T)
        x = self.conv(x.transpose(1, 2).unsqueeze(1))  # (B, d, T', F')
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        return x, ((frames - 1) // 2 - 1) // 2


class FeedForward(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.w1 = nn.Linear(d, 4 * d)
        self.w2 = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(self.w2(self.drop(F.silu(self.w1(self.norm(x))))))


class SelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads
        self.drop = nn.Dropout(0.1)

    def forward(self, x, pad_mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn_mask = (~pad_mask)[:, None, None, :]
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=0.1 if self.training else 0.0
        )
        return self.drop(self.proj(y.transpose(1, 2).reshape(b, t, d)))


class ConvModule(nn.Module):
    def __init__(self, d, kernel=31):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, pad_mask):
        y = self.norm(x).masked_fill(pad_mask[..., None], 0.0).transpose(1, 2)
        y = F.glu(self.pw1(y), dim=1)
        y = self.pw2(F.silu(self.bn(self.dw(y))))
        return self.drop(y.transpose(1, 2))


class ConformerBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ff1 = FeedForward(d)
        self.mhsa = SelfAttention(d, heads)
        self.conv = ConvModule(d)
        self.ff2 = FeedForward(d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x, pad_mask):
        x = x + 0.5 * self.ff1(x)
        x = x + self.mhsa(x, pad_mask)
        x = x + self.conv(x, pad_mask)
        x = x + 0.5 * self.ff2(x)
        return self.norm(x)


class ConformerCTC(nn.Module):
    def __init__(self):
        super().__init__()
        self.frontend = LogMel()
        self.subsample = Conv2dSubsampling(D)
        self.blocks = nn.ModuleList(ConformerBlock(D, HEADS) for _ in range(LAYERS))
        self.head = nn.Linear(D, VOCAB)

    def encode(self, feats, frames):
        x, lens = self.subsample(feats, frames)
        pad_mask = torch.arange(x.shape[1], device=x.device)[None, :] >= lens[:, None]
        for blk in self.blocks:
            x = blk(x, pad_mask)
        return self.head(x), lens


gen = torch.Generator().manual_seed(16804)
model = ConformerCTC().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1.0, betas=(0.9, 0.98), weight_decay=1e-3)
warmup = 25
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: 5e-4 * math.sqrt(warmup) * min((s + 1) ** -0.5, (s + 1) * warmup**-1.5)
)
print(f"params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n, lo, hi):
    lengths = torch.tensor([int(16000 * (lo + (hi - lo) * i / max(n - 1, 1))) for i in range(n)]).flip(0)
    wave = torch.zeros(n, int(lengths.max()))
    for i in range(n):
        wave[i, : int(lengths[i])] = 0.1 * torch.randn(int(lengths[i]), generator=gen)
    n_tok = (lengths // 16000 * 3).tolist()
    targets = torch.zeros(n, max(n_tok), dtype=torch.long)
    for i, k in enumerate(n_tok):
        targets[i, :k] = torch.randint(1, VOCAB, (k,), generator=gen)
    return wave.to(device), lengths.to(device), targets.to(device), torch.tensor(n_tok, device=device)


model.train()
for step in range(STEPS):
    wave, lengths, targets, target_lengths = batch(B, SEC_MIN, SEC_MAX)
    with torch.no_grad():
        feats, frames = model.frontend(wave, lengths)
    feats = spec_augment(feats, frames.cpu(), gen)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits, out_lens = model.encode(feats, frames)
    log_probs = F.log_softmax(logits.float(), dim=-1).transpose(0, 1)
    loss = F.ctc_loss(log_probs, targets, out_lens, target_lengths, blank=0, zero_infinity=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} frames {feats.shape[-1]} loss {loss.item():.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del wave, feats, logits, log_probs, loss

model.eval()
emitted = 0
with torch.no_grad():
    for _ in range(EVAL_N // B):
        wave, lengths, targets, target_lengths = batch(B, SEC_MIN, SEC_MAX)
        feats, frames = model.frontend(wave, lengths)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits, out_lens = model.encode(feats, frames)
        best = logits.argmax(-1)
        keep = torch.ones_like(best, dtype=torch.bool)
        keep[:, 1:] = best[:, 1:] != best[:, :-1]
        keep &= best != 0
        keep &= torch.arange(best.shape[1], device=device)[None, :] < out_lens[:, None]
        emitted += int(keep.sum())
print(f"eval emitted {emitted}")
del wave, feats, logits, best, keep
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    wave, lengths, _, _ = batch(LONG_B, LONG_SEC, LONG_SEC)
    feats, frames = model.frontend(wave, lengths)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits, out_lens = model.encode(feats, frames)
    probs = logits.float().softmax(-1)
print(f"long-form {tuple(probs.shape)}")
if device == "cuda":
    print(
        f"long allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
