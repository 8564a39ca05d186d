"""FastSpeech 2 by hand: phoneme embedding + sinusoidal positions, 4 encoder FFT blocks (SDPA self-attention
with a key-padding mask, conv1d feed-forward 256 -> 1024 -> 256 with kernel 9 and 1), a variance adaptor
(duration / pitch / energy predictors: two conv1d + LayerNorm + ReLU + linear; pitch and energy quantized
into 256 bins by torch.bucketize and embedded), a length regulator by repeat_interleave with durations
FIXED per batch (every phoneme lasts 4 frames, so sizes never follow values), 4 decoder FFT blocks, an
80-bin mel linear and a 5-layer conv1d postnet with tanh and BatchNorm.

bf16 autocast, fused AdamW with the Noam warmup schedule by LambdaLR, gradient clipping at 1.0, batch 48,
128 phonemes -> 512 frames. Phases: 3 training steps; inference_mode synthesis at batch 96; 3 steps under
fp16 autocast with GradScaler (init scale 2^12) and foreach Adam. 3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2231)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, T, REP, D = (2, 16, 4, 64) if SMALL else (48, 128, 4, 256)
VOCAB, MEL = 80, 80


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
              f"reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def sinusoid(n, d):
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


class FFT(nn.Module):
    def __init__(self, d, heads=2, hidden=1024):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.n1 = nn.LayerNorm(d)
        self.c1 = nn.Conv1d(d, hidden, 9, padding=4)
        self.c2 = nn.Conv1d(hidden, d, 1)
        self.n2 = nn.LayerNorm(d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, mask):  # mask [B, T] True = valid
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :], dropout_p=0.1 if self.training else 0.0)
        x = self.n1(x + self.drop(self.o(a.transpose(1, 2).reshape(b, t, d))))
        x = x.masked_fill(~mask[..., None], 0.0)
        y = self.c2(F.relu(self.c1(x.transpose(1, 2)))).transpose(1, 2)
        x = self.n2(x + self.drop(y))
        return x.masked_fill(~mask[..., None], 0.0)


class Predictor(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c1 = nn.Conv1d(d, d, 3, padding=1)
        self.n1 = nn.LayerNorm(d)
        self.c2 = nn.Conv1d(d, d, 3, padding=1)
        self.n2 = nn.LayerNorm(d)
        self.lin = nn.Linear(d, 1)

    def forward(self, x):
        x = F.dropout(self.n1(F.relu(self.c1(x.transpose(1, 2))).transpose(1, 2)), 0.5, self.training)
        x = F.dropout(self.n2(F.relu(self.c2(x.transpose(1, 2))).transpose(1, 2)), 0.5, self.training)
        return self.lin(x).squeeze(-1)


class FastSpeech2(nn.Module):
    def __init__(self, d=D):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d, padding_idx=0)
        self.register_buffer("pe", sinusoid(4096, d), persistent=False)
        self.enc = nn.ModuleList(FFT(d) for _ in range(4))
        self.dur, self.pitch, self.energy = Predictor(d), Predictor(d), Predictor(d)
        self.register_buffer("bins", torch.linspace(-3, 3, 255))
        self.pitch_emb = nn.Embedding(256, d)
        self.energy_emb = nn.Embedding(256, d)
        self.dec = nn.ModuleList(FFT(d) for _ in range(4))
        self.mel = nn.Linear(d, MEL)
        chans = [MEL, 512, 512, 512, 512, MEL]
        self.post = nn.ModuleList(nn.Conv1d(chans[i], chans[i + 1], 5, padding=2) for i in range(5))
        self.post_bn = nn.ModuleList(nn.BatchNorm1d(chans[i + 1]) for i in range(5))

    def forward(self, ph, src_mask, durations, pitch_t, energy_t):
        x = self.emb(ph) + self.pe[: ph.shape[1]]
        for blk in self.enc:
            x = blk(x, src_mask)
        log_d = self.dur(x)
        p, e = self.pitch(x), self.energy(x)
        x = x + self.pitch_emb(torch.bucketize(pitch_t, self.bins)) + self.energy_emb(torch.bucketize(energy_t, self.bins))
        # length regulator: fixed durations, one batch item at a time, then stacked
        x = torch.stack([torch.repeat_interleave(x[i], durations[i], dim=0) for i in range(x.shape[0])])
        mel_mask = torch.repeat_interleave(src_mask, REP, dim=1)
        x = x + self.pe[: x.shape[1]]
        for blk in self.dec:
            x = blk(x, mel_mask)
        mel = self.mel(x)
        y = mel.transpose(1, 2)
        for i, (c, bn) in enumerate(zip(self.post, self.post_bn)):
            y = bn(c(y))
            if i < 4:
                y = F.dropout(torch.tanh(y), 0.5, self.training)
        return mel, mel + y.transpose(1, 2), log_d, p, e, mel_mask


def batch(b):
    ph = torch.randint(1, VOCAB, (b, T), device=device)
    lens = torch.full((b,), T, device=device)
    lens[b // 2:] = T * 3 // 4
    mask = torch.arange(T, device=device)[None] < lens[:, None]
    ph = ph.masked_fill(~mask, 0)
    dur = torch.full((b, T), REP, device=device, dtype=torch.long)
    pitch = torch.randn(b, T, device=device)
    energy = torch.randn(b, T, device=device)
    mel = torch.randn(b, T * REP, MEL, device=device)
    return ph, mask, dur, pitch, energy, mel


def loss_fn(out, tgt):
    mel, post, log_d, p, e, mel_mask = out
    ph, mask, dur, pitch, energy, target = tgt
    m = mel_mask[..., None].float()
    l_mel = (F.l1_loss(mel.float(), target, reduction="none") * m).sum() / m.sum() / MEL
    l_post = (F.l1_loss(post.float(), target, reduction="none") * m).sum() / m.sum() / MEL
    l_d = F.mse_loss(log_d.float()[mask], torch.log(dur.float() + 1)[mask])
    l_p = F.mse_loss(p.float()[mask], pitch[mask])
    l_e = F.mse_loss(e.float()[mask], energy[mask])
    return l_mel + l_post + l_d + l_p + l_e


model = FastSpeech2().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.01,
                        fused=device == "cuda")
warm = 4000
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: D ** -0.5 * min((s + 1) ** -0.5, (s + 1) * warm ** -1.5))
print("params", sum(p.numel() for p in model.parameters()))

for step in range(3):
    tgt = batch(B)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = model(*tgt[:5])
    loss = loss_fn(out, tgt)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    print(f"step {step} loss {loss.item():.4f} grad norm {gn.item():.3f}")
report("train_bf16")

model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    tgt = batch(2 * B)
    out = model(*tgt[:5])
    print("synth", tuple(out[1].shape), out[1].float().abs().mean().item())
    del out, tgt
report("inference")

model.train()
opt2 = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=True)
scaler = torch.amp.GradScaler(device, init_scale=2.0**12)
for step in range(3):
    tgt = batch(B)
    with torch.autocast(device, dtype=torch.float16):
        out = model(*tgt[:5])
    loss = loss_fn(out, tgt)
    opt2.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt2)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt2)
    scaler.update()
    print(f"fp16 step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
report("train_fp16_gradscaler")
