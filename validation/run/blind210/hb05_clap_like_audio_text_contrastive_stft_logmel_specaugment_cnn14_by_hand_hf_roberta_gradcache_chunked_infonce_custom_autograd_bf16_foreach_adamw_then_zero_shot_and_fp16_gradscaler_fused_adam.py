"""A CLAP-like audio-text contrastive model by hand, on random waveforms and random tokens.

Audio: 10-s clips at 16 kHz -> log-mels by hand (torch.stft n_fft 512, hop 160, Hann window; power;
a 64-band HTK mel filterbank built by hand; log), SpecAugment by hand (two time masks of 50 frames and
two mel masks of 8 bands a clip, from sampled starts, by masked_fill), and a PANNs CNN14 encoder by
hand (six blocks of two 3x3 Conv2d + BatchNorm2d + ReLU, 2x2 average pooling, 64 -> 2048 channels;
mean over mels, max + mean over time, fc 2048) with a two-layer projection into 512.
Text: a RobertaModel from RobertaConfig at roberta-base's size, 32-token captions right-padded with an
attention mask (lengths 8 to 32), the first token projected into 512 by a two-layer MLP.
Loss: the symmetric InfoNCE with a learned logit scale (clamped at 100) computed by a custom
torch.autograd.Function that takes the normalised embeddings and works in row chunks (logsumexp per
chunk in forward, the softmax rebuilt chunk by chunk in backward; only embeddings and per-row logsumexps
are saved).
Phase 1: GradCache: a global batch of 384 clip-caption pairs per step, embeddings first computed in
4 micro-batches of 96 under no_grad (RNG state kept per micro-batch), the loss and its gradient taken on
the cached embeddings, then each micro-batch re-run with autograd and backward(embedding gradient);
bf16 autocast, foreach AdamW, 2 steps.
Phase 2: zero-shot classification under inference_mode: 527 class prompts embedded, 256 clips in chunks
of 128, top-5 and a text-to-audio recall@1.
Phase 3: plain end-to-end training at batch 128 (no GradCache; F.cross_entropy over the full 128 x 128
logits both ways), the audio encoder in channels_last, fp16 autocast with GradScaler and fused Adam, 2
steps. 3 phases after the models'."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import RobertaConfig, RobertaModel

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21005)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
SR, N_FFT, HOP, MELS = 16000, 512, 160, 64
if SMALL:
    tcfg = RobertaConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=512
    )
    SECONDS, GLOBAL, MICRO, CLASSES, EVAL, EVAL_CHUNK, B3, WIDTHS = (
        1,
        8,
        4,
        10,
        8,
        4,
        4,
        (8, 8, 16, 16, 32, 32),
    )
else:
    tcfg = RobertaConfig()
    SECONDS, GLOBAL, MICRO, CLASSES, EVAL, EVAL_CHUNK, B3 = 10, 384, 96, 527, 256, 128, 128
    WIDTHS = (64, 128, 256, 512, 1024, 2048)
TOKENS = 32
tcfg._attn_implementation = "sdpa"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def mel_filterbank(n_mels, n_fft, sr):
    def hz_to_mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    mels = torch.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    lower, centre, upper = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (bins[None] - lower) / (centre - lower)
    down = (upper - bins[None]) / (upper - centre)
    return torch.clamp(torch.minimum(up, down), min=0.0)


FB = mel_filterbank(MELS, N_FFT, SR).to(device)
WINDOW = torch.hann_window(N_FFT, device=device)


def log_mels(wave):
    spec = torch.stft(wave, N_FFT, hop_length=HOP, window=WINDOW, return_complex=True)
    power = spec.abs().pow(2)  # (B, 257, T)
    mel = torch.matmul(FB, power)  # (B, 64, T)
    return torch.log(mel + 1e-6).transpose(1, 2).unsqueeze(1)  # (B, 1, T, 64)


def spec_augment(x):
    b, _, t, m = x.shape
    tt = torch.arange(t, device=x.device)
    mm = torch.arange(m, device=x.device)
    mask = torch.zeros(b, 1, t, m, dtype=torch.bool, device=x.device)
    for _ in range(2):
        ts = torch.randint(0, t - 50, (b, 1, 1, 1), device=x.device)
        ms = torch.randint(0, m - 8, (b, 1, 1, 1), device=x.device)
        mask |= ((tt.view(1, 1, -1, 1) >= ts) & (tt.view(1, 1, -1, 1) < ts + 50)).expand(-1, -1, -1, m)
        mask |= ((mm.view(1, 1, 1, -1) >= ms) & (mm.view(1, 1, 1, -1) < ms + 8)).expand(-1, -1, t, -1)
    return x.masked_fill(mask, 0.0)


class ConvBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)

    def forward(self, x, pool):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return F.avg_pool2d(x, pool) if pool > 1 else x


class CNN14(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn0 = nn.BatchNorm2d(MELS)
        chans = (1, *WIDTHS)
        self.blocks = nn.ModuleList(ConvBlock(chans[i], chans[i + 1]) for i in range(6))
        self.fc = nn.Linear(WIDTHS[-1], 2048)
        self.proj = nn.Sequential(nn.Linear(2048, 512), nn.ReLU(), nn.Linear(512, 512))

    def forward(self, x):
        x = self.bn0(x.transpose(1, 3)).transpose(1, 3)  # BN over mel bins, PANNs' bn0
        for i, block in enumerate(self.blocks):
            x = F.dropout(block(x, 2 if i < 5 else 1), 0.2, self.training)
        x = x.mean(dim=3)  # over mels
        x = x.amax(dim=2) + x.mean(dim=2)  # over time
        x = F.relu(self.fc(F.dropout(x, 0.5, self.training)))
        return self.proj(x)


class TextEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.roberta = RobertaModel(tcfg, add_pooling_layer=False)
        self.proj = nn.Sequential(nn.Linear(tcfg.hidden_size, 512), nn.ReLU(), nn.Linear(512, 512))

    def forward(self, ids, mask):
        return self.proj(self.roberta(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0])


class ChunkedInfoNCE(torch.autograd.Function):
    """Symmetric InfoNCE over normalised a, t (N, D) with logits scale * a @ t.T, by row chunks."""

    @staticmethod
    def forward(ctx, a, t, scale, chunk):
        n = a.shape[0]
        lse_a = torch.empty(n, device=a.device, dtype=a.dtype)
        lse_t = torch.empty(n, device=a.device, dtype=a.dtype)
        for i in range(0, n, chunk):
            lse_a[i : i + chunk] = (scale * a[i : i + chunk] @ t.T).logsumexp(dim=1)
            lse_t[i : i + chunk] = (scale * t[i : i + chunk] @ a.T).logsumexp(dim=1)
        diag = scale * (a * t).sum(dim=1)
        ctx.save_for_backward(a, t, scale, lse_a, lse_t)
        ctx.chunk = chunk
        return 0.5 * ((lse_a - diag).mean() + (lse_t - diag).mean())

    @staticmethod
    def backward(ctx, grad):
        a, t, scale, lse_a, lse_t = ctx.saved_tensors
        n, chunk = a.shape[0], ctx.chunk
        ga, gt = torch.zeros_like(a), torch.zeros_like(t)
        gs = torch.zeros((), device=a.device, dtype=a.dtype)
        for rows, cols, lse, grow, gcol in ((a, t, lse_a, ga, gt), (t, a, lse_t, gt, ga)):
            for i in range(0, n, chunk):
                logits = scale * rows[i : i + chunk] @ cols.T
                p = torch.exp(logits - lse[i : i + chunk, None]) / (2 * n)
                grow[i : i + chunk] += scale * (p @ cols)
                gcol += scale * (p.T @ rows[i : i + chunk])
                gs += (p * logits).sum() / scale
        ga -= scale * t / n
        gt -= scale * a / n
        gs -= (a * t).sum() / n
        return grad * ga, grad * gt, grad * gs, None


audio_enc = CNN14().to(device)
text_enc = TextEncoder().to(device)
logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07), device=device))
params = list(audio_enc.parameters()) + list(text_enc.parameters()) + [logit_scale]
n_audio = sum(p.numel() for p in audio_enc.parameters())
print(f"audio {n_audio} text {sum(p.numel() for p in text_enc.parameters())}")
report("models")


def captions(n):
    lengths = torch.randint(8, TOKENS + 1, (n,))
    ids = torch.randint(3, tcfg.vocab_size, (n, TOKENS))
    mask = (torch.arange(TOKENS)[None] < lengths[:, None]).long()
    ids = ids.masked_fill(mask == 0, tcfg.pad_token_id)
    return ids.to(device), mask.to(device)


def rng_state():
    return torch.cuda.get_rng_state() if device == "cuda" else torch.get_rng_state()


def set_rng_state(state):
    if device == "cuda":
        torch.cuda.set_rng_state(state)
    else:
        torch.set_rng_state(state)


def embed(mels, ids, mask, dtype):
    with torch.autocast(device, dtype=dtype, enabled=amp):
        za = audio_enc(mels)
        zt = text_enc(ids, mask)
    return F.normalize(za.float(), dim=-1), F.normalize(zt.float(), dim=-1)


# phase 1: GradCache with the chunked custom-Function loss, bf16 autocast, foreach AdamW
opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, foreach=True)
audio_enc.train()
text_enc.train()
for step in range(2):
    waves = torch.randn(GLOBAL, SR * SECONDS, device=device)
    with torch.no_grad():
        mels = torch.cat([spec_augment(log_mels(w)) for w in waves.split(MICRO)])
    del waves
    ids, mask = captions(GLOBAL)
    states, cached_a, cached_t = [], [], []
    with torch.no_grad():
        for m, i, k in zip(mels.split(MICRO), ids.split(MICRO), mask.split(MICRO), strict=False):
            states.append(rng_state())
            za, zt = embed(m, i, k, torch.bfloat16)
            cached_a.append(za)
            cached_t.append(zt)
    ca = torch.cat(cached_a).requires_grad_(True)
    ct = torch.cat(cached_t).requires_grad_(True)
    loss = ChunkedInfoNCE.apply(ca, ct, logit_scale.exp().clamp(max=100.0), 128 if not SMALL else 4)
    loss.backward()
    for j, (m, i, k) in enumerate(zip(mels.split(MICRO), ids.split(MICRO), mask.split(MICRO), strict=False)):
        set_rng_state(states[j])
        za, zt = embed(m, i, k, torch.bfloat16)
        sl = slice(j * MICRO, (j + 1) * MICRO)
        torch.autograd.backward([za, zt], [ca.grad[sl], ct.grad[sl]])
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"gradcache step {step} loss {loss.item():.4f} scale {logit_scale.exp().item():.2f}")
    del mels, ca, ct, cached_a, cached_t, za, zt, loss
report("gradcache chunked infonce bf16 foreach adamw")

# phase 2: zero-shot classification and retrieval
audio_enc.eval()
text_enc.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
    cids, cmask = captions(CLASSES)
    classes = F.normalize(text_enc(cids, cmask).float(), dim=-1)
    hits, audio_embs = 0, []
    labels = torch.randint(0, CLASSES, (EVAL,), device=device)
    for j in range(0, EVAL, EVAL_CHUNK):
        mels = log_mels(torch.randn(EVAL_CHUNK, SR * SECONDS, device=device))
        za = F.normalize(audio_enc(mels).float(), dim=-1)
        audio_embs.append(za)
        top5 = (za @ classes.T).topk(5, dim=-1).indices
        hits += (top5 == labels[j : j + EVAL_CHUNK, None]).any(dim=-1).sum()
    audio_embs = torch.cat(audio_embs)
    qids, qmask = captions(EVAL)
    queries = F.normalize(text_enc(qids, qmask).float(), dim=-1)
    recall1 = ((queries @ audio_embs.T).argmax(dim=-1) == torch.arange(EVAL, device=device)).float().mean()
print(f"zero-shot top-5 {int(hits) / EVAL:.3f} text-to-audio R@1 {recall1.item():.3f}")
del classes, audio_embs, queries, mels, za
report("zero-shot and retrieval")

# phase 3: plain end-to-end batch 128, channels_last audio encoder, fp16 autocast, GradScaler, fused Adam
del opt
audio_enc.to(memory_format=torch.channels_last)
audio_enc.train()
text_enc.train()
opt = torch.optim.Adam(params, lr=5e-5, fused=device == "cuda")
scaler = torch.amp.GradScaler("cuda", enabled=amp)
for step in range(2):
    with torch.no_grad():
        mels = spec_augment(log_mels(torch.randn(B3, SR * SECONDS, device=device)))
    mels = mels.contiguous(memory_format=torch.channels_last)
    ids, mask = captions(B3)
    za, zt = embed(mels, ids, mask, torch.float16)
    logits = logit_scale.exp().clamp(max=100.0) * za @ zt.T
    target = torch.arange(B3, device=device)
    loss = 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"end-to-end step {step} loss {loss.item():.4f}")
    del za, zt, logits, loss
report("end-to-end fp16 gradscaler fused adam channels_last")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
