"""A streaming Conformer-CTC written by hand (U2/WeNet-style dynamic chunk training), with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set before torch is imported.

Features on the GPU: torch.stft (n_fft 400, hop 160, Hann window) power spectrum, an HTK mel filterbank
of 80 built by hand and applied by matmul, log and per-utterance mean/variance normalisation over the
valid frames. Front end: two Conv2d 3x3 stride 2 with ReLU (4x subsampling, 40 ms), Linear to 512.
Blocks (12): macaron half-step FFNs (2048, SiLU), multi-head self-attention (8 heads) with rotary
positions by hand and SDPA under a boolean mask (chunk mask with 4 chunks of left context AND key padding,
OR the diagonal, (B, 1, T, T)), a convolution module with pointwise Conv1d, GLU, a causal depthwise Conv1d of 15 (left
padding only), LayerNorm instead of BatchNorm and SiLU; a CTC head over 500 BPE units, F.ctc_loss in
float32 with zero_infinity over tensor lengths.

Training: batch 32 of 6 to 12 s, the chunk size drawn per batch from {8, 16, 32} frames by a seeded Python
RNG, bf16 autocast, foreach AdamW (lr 1e-3, weight decay 1e-3), clipping at 5.

Phases: the first step; 3 more steps; streaming greedy CTC inference under inference_mode of 8 x 20 s in
chunks of 16 frames, each block keeping a cache of its last 64 keys/values and the last 14 inputs of its
causal conv (torch.cat then slicing); then, after empty_cache(), full-context training (padding mask only)
with every block checkpointed (use_reentrant=False) under fp16 autocast with GradScaler and foreach RAdam
(decoupled weight decay), 3 steps. 4 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2054)
rng = random.Random(2054)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    D, LAYERS, HEADS, FFN_DIM, VOCAB, BATCH, MIN_S, MAX_S, STREAM_B, STREAM_S = (
        64,
        2,
        4,
        128,
        50,
        3,
        16000,
        32000,
        2,
        48000,
    )
else:
    D, LAYERS, HEADS, FFN_DIM, VOCAB, BATCH, MIN_S, MAX_S, STREAM_B, STREAM_S = (
        512,
        12,
        8,
        2048,
        500,
        32,
        96000,
        192000,
        8,
        320000,
    )
HD = D // HEADS
KERNEL, LEFT_CHUNKS, STREAM_CHUNK = 15, 4, 16
N_FFT, HOP, N_MELS = 400, 160, 80


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def htk_mel_filterbank(n_freqs, n_mels, sample_rate=16000):
    mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)  # noqa: E731
    pts = torch.linspace(mel(0.0), mel(sample_rate / 2), n_mels + 2)
    hz = 700.0 * (10 ** (pts / 2595.0) - 1.0)
    freqs = torch.linspace(0, sample_rate / 2, n_freqs)
    lower = (freqs[None] - hz[:-2, None]) / (hz[1:-1, None] - hz[:-2, None])
    upper = (hz[2:, None] - freqs[None]) / (hz[2:, None] - hz[1:-1, None])
    return torch.clamp(torch.minimum(lower, upper), min=0.0).T  # (n_freqs, n_mels)


window = torch.hann_window(N_FFT, device=device)
mel_fb = htk_mel_filterbank(N_FFT // 2 + 1, N_MELS).to(device)


def log_mel(wave, n_samples):
    spec = torch.stft(wave, N_FFT, HOP, window=window, return_complex=True).abs().pow(2)
    feats = torch.matmul(spec.transpose(1, 2), mel_fb).clamp(min=1e-10).log()
    n_frames = n_samples // HOP + 1
    valid = (torch.arange(feats.shape[1], device=device)[None] < n_frames[:, None]).unsqueeze(-1)
    count = n_frames.view(-1, 1, 1)
    mean = (feats * valid).sum(1, keepdim=True) / count
    var = ((feats - mean).pow(2) * valid).sum(1, keepdim=True) / count
    return ((feats - mean) / (var + 1e-5).sqrt()) * valid, n_frames


def rotary(x, offset):
    t = x.shape[-2]
    inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, device=x.device, dtype=torch.float32) / HD))
    ang = torch.outer(torch.arange(offset, offset + t, device=x.device, dtype=torch.float32), inv)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class FFN(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.net = nn.Sequential(
            nn.Linear(D, FFN_DIM), nn.SiLU(), nn.Dropout(0.1), nn.Linear(FFN_DIM, D), nn.Dropout(0.1)
        )

    def forward(self, x):
        return x + 0.5 * self.net(self.norm(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ff1, self.ff2 = FFN(), FFN()
        self.attn_norm = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.conv_norm = nn.LayerNorm(D)
        self.pw1 = nn.Conv1d(D, 2 * D, 1)
        self.dw = nn.Conv1d(D, D, KERNEL, groups=D)
        self.dw_norm = nn.LayerNorm(D)
        self.pw2 = nn.Conv1d(D, D, 1)
        self.out_norm = nn.LayerNorm(D)

    def attention(self, x, mask, offset=0, kv_cache=None):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        q, k = rotary(q, offset), rotary(k, offset)
        if kv_cache is not None:
            k = torch.cat([kv_cache[0], k], dim=2)
            v = torch.cat([kv_cache[1], v], dim=2)
            kv_cache = (k[:, :, -LEFT_CHUNKS * STREAM_CHUNK :], v[:, :, -LEFT_CHUNKS * STREAM_CHUNK :])
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1 if self.training else 0.0)
        return x + self.proj(a.transpose(1, 2).reshape(b, t, D)), kv_cache

    def conv(self, x, pad_mask, conv_cache=None):
        y = self.conv_norm(x)
        if pad_mask is not None:
            y = y.masked_fill(~pad_mask.unsqueeze(-1), 0.0)
        y = F.glu(self.pw1(y.transpose(1, 2)), dim=1)
        if conv_cache is None:
            y = F.pad(y, (KERNEL - 1, 0))
        else:
            y = torch.cat([conv_cache, y], dim=2)
            conv_cache = y[:, :, -(KERNEL - 1) :]
        y = self.dw(y)
        y = F.silu(self.dw_norm(y.transpose(1, 2))).transpose(1, 2)
        return x + self.pw2(y).transpose(1, 2), conv_cache

    def forward(self, x, mask, pad_mask):
        x = self.ff1(x)
        x, _ = self.attention(x, mask)
        x, _ = self.conv(x, pad_mask)
        return self.out_norm(self.ff2(x))

    def forward_chunk(self, x, offset, cache):
        x = self.ff1(x)
        x, kv = self.attention(x, None, offset, cache[0])
        x, cc = self.conv(x, None, cache[1])
        return self.out_norm(self.ff2(x)), (kv, cc)


class StreamingConformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = nn.Sequential(nn.Conv2d(1, D, 3, 2), nn.ReLU(), nn.Conv2d(D, D, 3, 2), nn.ReLU())
        self.sub_out = nn.Linear(D * (((N_MELS - 1) // 2 - 1) // 2), D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ctc = nn.Linear(D, VOCAB)
        self.use_checkpoint = False

    def subsample(self, feats, n_frames):
        x = self.sub(feats.unsqueeze(1))
        b, c, t, f = x.shape
        lengths = ((n_frames - 1) // 2 - 1) // 2
        return self.sub_out(x.transpose(1, 2).reshape(b, t, c * f)), lengths

    def forward(self, feats, n_frames, chunk):
        x, lengths = self.subsample(feats, n_frames)
        t = x.shape[1]
        pad_mask = torch.arange(t, device=x.device)[None] < lengths[:, None]
        mask = pad_mask[:, None, None, :]
        if chunk is not None:
            idx = torch.arange(t, device=x.device) // chunk
            chunk_mask = (idx[None, :] <= idx[:, None]) & (idx[None, :] >= idx[:, None] - LEFT_CHUNKS)
            mask = mask & chunk_mask[None, None]
        mask = mask | torch.eye(t, dtype=torch.bool, device=x.device)  # no fully masked row (padded queries)
        for blk in self.blocks:
            if self.use_checkpoint:
                x = checkpoint(blk, x, mask, pad_mask, use_reentrant=False)
            else:
                x = blk(x, mask, pad_mask)
        return self.ctc(x), lengths


def make_batch(batch, min_s, max_s):
    n = torch.randint(min_s, max_s + 1, (batch,))
    n[0] = max_s
    wave = torch.randn(batch, max_s) * (torch.arange(max_s)[None] < n[:, None])
    feats, n_frames = log_mel(wave.to(device), n.to(device))
    t_len = torch.randint(10, 60, (batch,))
    targets = torch.randint(1, VOCAB, (int(t_len.sum()),))
    return feats, n_frames, targets.to(device), t_len.to(device)


def ctc_step(opt, chunk, dtype, scaler=None):
    feats, n_frames, targets, t_len = make_batch(BATCH, MIN_S, MAX_S)
    with torch.autocast("cuda", dtype=dtype, enabled=amp):
        logits, lengths = model(feats, n_frames, chunk)
    log_probs = logits.float().log_softmax(-1).transpose(0, 1)
    loss = F.ctc_loss(log_probs, targets, lengths, t_len, blank=0, zero_infinity=True)
    if scaler is None:
        loss.backward()
    else:
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    if scaler is None:
        opt.step()
    else:
        scaler.step(opt)
        scaler.update()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model = StreamingConformer().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-3, foreach=True)
model.train()
chunk = rng.choice([8, 16, 32])
print(f"step 0 chunk {chunk} loss {ctc_step(opt, chunk, torch.bfloat16):.4f}")
report("first step")
for step in range(1, 4):
    chunk = rng.choice([8, 16, 32])
    print(f"step {step} chunk {chunk} loss {ctc_step(opt, chunk, torch.bfloat16):.4f}")
report("train chunked bf16")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    feats, n_frames, _, _ = make_batch(STREAM_B, STREAM_S, STREAM_S)
    x, lengths = model.subsample(feats, n_frames)
    caches = [(None, None)] * LAYERS
    caches = [
        (
            (x.new_zeros(STREAM_B, HEADS, 0, HD), x.new_zeros(STREAM_B, HEADS, 0, HD)),
            x.new_zeros(STREAM_B, D, KERNEL - 1),
        )
        for _ in range(LAYERS)
    ]
    hyps = []
    for start in range(0, x.shape[1], STREAM_CHUNK):
        h = x[:, start : start + STREAM_CHUNK]
        for i, blk in enumerate(model.blocks):
            h, caches[i] = blk.forward_chunk(h, start, caches[i])
        hyps.append(model.ctc(h).argmax(-1))
    hyp = torch.cat(hyps, dim=1)
    print(f"streamed {x.shape[1]} frames in {len(hyps)} chunks, {(hyp != 0).sum().item()} non-blank")
report("streaming inference")

del opt, caches, hyps, hyp, x, h, feats
if device == "cuda":
    torch.cuda.empty_cache()
model.train()
model.use_checkpoint = True
opt = torch.optim.RAdam(
    model.parameters(), lr=1e-3, weight_decay=1e-3, decoupled_weight_decay=True, foreach=True
)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
for step in range(3):
    print(
        f"full-context step {step} loss {ctc_step(opt, None, torch.float16, scaler):.4f} scale {scaler.get_scale()}"
    )
report("full context fp16 checkpoint")
