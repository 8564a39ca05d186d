"""An EnCodec-like neural audio codec by hand on random 24 kHz waveforms.

Encoder (SEANet-like): Conv1d 1 -> 32 (k 7), four stages of a residual unit (ELU, Conv1d k 3, ELU,
Conv1d k 1, skip) and a strided Conv1d (strides 2, 4, 5, 8: 320 samples a frame, channels doubling to
512), a 2-layer LSTM over the 128-dim latents with a skip, Conv1d to 128. Decoder mirrors it with
ConvTranspose1d. Every convolution under torch.nn.utils.parametrizations.weight_norm.
Quantizer: residual vector quantization, 8 codebooks of 1024 x 128 in fp32 (autocast off), squared
distances by hand (x^2 - 2 x c + c^2), argmin, F.embedding, EMA updates in place (cluster sizes and
embedding sums by one_hot matmuls, mul_/add_, Laplace smoothing, dead codes (cluster size < 2) replaced
by torch.where with random latents of the batch), commitment loss, the straight-through estimator by a
custom torch.autograd.Function.
Discriminator: multi-scale STFT (windows 2048, 1024, 512; real and imaginary parts as 2 channels, five
weight-normed Conv2d of 32 channels with time dilations 1, 2, 4), hinge losses and feature matching.
Losses: L1 on waveforms, L1 + L2 on mel-like magnitude spectrograms at five resolutions (64 to 1024,
torch.stft), commitment 1.0.
Phase 1: batch 24 x 1 s, bf16 autocast, fused AdamW for both networks, 3 steps.
Phase 2: inference_mode: 8 clips of 10 s encoded to codes (int64, 8 x 750 a clip) and decoded.
Phase 3: fp16 autocast with one GradScaler over both optimizers, encoder and decoder stages under
torch.utils.checkpoint (non-reentrant), quantizer dropout (1 to 8 codebooks a step from a seeded Python
random), batch 32 x 1 s, 3 steps. 3 phases after the models'."""

import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21502)
rng = random.Random(21502)
device = "cuda" if torch.cuda.is_available() else "cpu"
SR = 24000
B1, B3, EVAL_CLIPS, EVAL_SECONDS = (24, 32, 8, 10) if not SMALL else (2, 2, 1, 1)
SEG = SR if not SMALL else 3200
CH, DIM, N_Q, K = (32, 128, 8, 1024) if not SMALL else (8, 16, 2, 32)
STRIDES = (2, 4, 5, 8)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class ResUnit(nn.Module):
    def __init__(self, ch, dilation):
        super().__init__()
        self.c1 = weight_norm(nn.Conv1d(ch, ch // 2, 3, dilation=dilation, padding=dilation))
        self.c2 = weight_norm(nn.Conv1d(ch // 2, ch, 1))

    def forward(self, x):
        return x + self.c2(F.elu(self.c1(F.elu(x))))


class EncStage(nn.Module):
    def __init__(self, ch, stride):
        super().__init__()
        self.res = ResUnit(ch, 1)
        self.down = weight_norm(nn.Conv1d(ch, ch * 2, 2 * stride, stride, padding=stride // 2 + stride % 2))

    def forward(self, x):
        return self.down(F.elu(self.res(x)))


class DecStage(nn.Module):
    def __init__(self, ch, stride):
        super().__init__()
        self.stride = stride
        self.up = weight_norm(nn.ConvTranspose1d(ch, ch // 2, 2 * stride, stride, padding=stride // 2))
        self.res = ResUnit(ch // 2, 1)

    def forward(self, x):
        length = x.shape[-1] * self.stride
        return self.res(self.up(F.elu(x))[..., :length])


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = weight_norm(nn.Conv1d(1, CH, 7, padding=3))
        self.stages = nn.ModuleList(EncStage(CH * 2**i, s) for i, s in enumerate(STRIDES))
        self.lstm = nn.LSTM(CH * 16, CH * 16, num_layers=2, batch_first=True)
        self.post = weight_norm(nn.Conv1d(CH * 16, DIM, 7, padding=3))

    def forward(self, x, ckpt=False):
        x = self.pre(x)
        for st in self.stages:
            x = checkpoint(st, x, use_reentrant=False) if ckpt else st(x)
        y, _ = self.lstm(x.transpose(1, 2))
        x = x + y.transpose(1, 2)
        return self.post(F.elu(x))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = weight_norm(nn.Conv1d(DIM, CH * 16, 7, padding=3))
        self.lstm = nn.LSTM(CH * 16, CH * 16, num_layers=2, batch_first=True)
        self.stages = nn.ModuleList(DecStage(CH * 2 ** (4 - i), s) for i, s in enumerate(reversed(STRIDES)))
        self.post = weight_norm(nn.Conv1d(CH, 1, 7, padding=3))

    def forward(self, x, ckpt=False):
        x = self.pre(x)
        y, _ = self.lstm(x.transpose(1, 2))
        x = x + y.transpose(1, 2)
        for st in self.stages:
            x = checkpoint(st, x, use_reentrant=False) if ckpt else st(x)
        return torch.tanh(self.post(F.elu(x)))


class StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, q):
        return q.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class EMACodebook(nn.Module):
    def __init__(self, decay=0.99, eps=1e-5):
        super().__init__()
        self.decay, self.eps = decay, eps
        embed = torch.randn(K, DIM)
        self.register_buffer("embed", embed)
        self.register_buffer("cluster_size", torch.ones(K))
        self.register_buffer("embed_avg", embed.clone())

    def codes(self, flat):
        dist = flat.pow(2).sum(1, keepdim=True) - 2 * flat @ self.embed.t() + self.embed.pow(2).sum(1)[None]
        return dist.argmin(dim=1)

    def forward(self, x):  # x (N, DIM) fp32
        idx = self.codes(x)
        q = F.embedding(idx, self.embed)
        if self.training:
            with torch.no_grad():
                onehot = F.one_hot(idx, K).type(x.dtype)
                self.cluster_size.mul_(self.decay).add_(onehot.sum(0), alpha=1 - self.decay)
                self.embed_avg.mul_(self.decay).add_(onehot.t() @ x, alpha=1 - self.decay)
                n = self.cluster_size.sum()
                size = (self.cluster_size + self.eps) / (n + K * self.eps) * n
                self.embed.copy_(self.embed_avg / size.unsqueeze(1))
                dead = self.cluster_size < 2
                samples = x[torch.randint(0, x.shape[0], (K,), device=x.device)]
                self.embed.copy_(torch.where(dead[:, None], samples, self.embed))
        return q, idx


class RVQ(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(EMACodebook() for _ in range(N_Q))

    def forward(self, z, n_q=N_Q):
        b, d, t = z.shape
        with torch.autocast("cuda", enabled=False):
            residual = z.float().transpose(1, 2).reshape(-1, d)
            out = torch.zeros_like(residual)
            commit = residual.new_zeros(())
            codes = []
            for layer in self.layers[:n_q]:
                q, idx = layer(residual.detach())
                commit = commit + F.mse_loss(residual, q.detach())
                q = StraightThrough.apply(residual, q)
                out = out + q
                residual = residual - q.detach()
                codes.append(idx)
            out = out.view(b, t, d).transpose(1, 2)
        return out, torch.stack(codes).view(n_q, b, t), commit

    @torch.no_grad()
    def decode(self, codes):
        out = sum(F.embedding(c, layer.embed) for c, layer in zip(codes, self.layers, strict=False))
        return out.transpose(1, 2)


class STFTDisc(nn.Module):
    def __init__(self, n_fft):
        super().__init__()
        self.n_fft = n_fft
        self.register_buffer("window", torch.hann_window(n_fft))
        c = 32
        self.convs = nn.ModuleList(
            [
                weight_norm(nn.Conv2d(2, c, (3, 9), padding=(1, 4))),
                weight_norm(nn.Conv2d(c, c, (3, 9), (1, 2), dilation=(1, 1), padding=(1, 4))),
                weight_norm(nn.Conv2d(c, c, (3, 9), (1, 2), dilation=(2, 1), padding=(2, 4))),
                weight_norm(nn.Conv2d(c, c, (3, 9), (1, 2), dilation=(4, 1), padding=(4, 4))),
                weight_norm(nn.Conv2d(c, c, (3, 3), padding=(1, 1))),
            ]
        )
        self.post = weight_norm(nn.Conv2d(c, 1, (3, 3), padding=(1, 1)))

    def forward(self, y):
        spec = torch.stft(
            y.squeeze(1).float(), self.n_fft, self.n_fft // 4, window=self.window, return_complex=True
        )
        x = torch.view_as_real(spec).permute(0, 3, 2, 1)  # (B, 2, frames, freq)
        feats = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), 0.2)
            feats.append(x)
        return self.post(x), feats


class MSSTFTDisc(nn.Module):
    def __init__(self):
        super().__init__()
        self.discs = nn.ModuleList(STFTDisc(n) for n in (2048, 1024, 512))

    def forward(self, y):
        return [d(y) for d in self.discs]


WINDOWS = {n: torch.hann_window(n, device=device) for n in (64, 128, 256, 512, 1024)}


def spectral_loss(y, y_hat):
    loss = 0
    for n, w in WINDOWS.items():
        s = torch.stft(y.squeeze(1), n, n // 4, window=w, return_complex=True).abs()
        s_hat = torch.stft(y_hat.squeeze(1).float(), n, n // 4, window=w, return_complex=True).abs()
        loss = loss + F.l1_loss(s_hat, s) + F.mse_loss(s_hat, s)
    return loss


encoder, decoder, rvq, disc = (
    Encoder().to(device),
    Decoder().to(device),
    RVQ().to(device),
    MSSTFTDisc().to(device),
)
gen_params = list(encoder.parameters()) + list(decoder.parameters())
print(f"codec {sum(p.numel() for p in gen_params)} discriminator {sum(p.numel() for p in disc.parameters())}")
fused = device == "cuda"
opt_g = torch.optim.AdamW(gen_params, lr=3e-4, betas=(0.5, 0.9), fused=fused)
opt_d = torch.optim.AdamW(disc.parameters(), lr=3e-4, betas=(0.5, 0.9), fused=fused)
report("models")


def step(batch, dtype, scaler=None, ckpt=False, n_q=N_Q):
    y = (torch.rand(batch, 1, SEG, device=device) * 2 - 1) * 0.5
    with torch.autocast("cuda", dtype=dtype, enabled=device == "cuda"):
        z = encoder(y, ckpt)
        q, _, commit = rvq(z, n_q)
        y_hat = decoder(q, ckpt)
        d_real = disc(y)
        d_fake = disc(y_hat.detach())
        loss_d = sum(
            F.relu(1 - r).mean() + F.relu(1 + f).mean() for (r, _), (f, _) in zip(d_real, d_fake, strict=True)
        )
    opt_d.zero_grad(set_to_none=True)
    (scaler.scale(loss_d) if scaler else loss_d).backward()
    scaler.step(opt_d) if scaler else opt_d.step()
    del d_real, d_fake
    with torch.autocast("cuda", dtype=dtype, enabled=device == "cuda"):
        d_real = disc(y)
        d_fake = disc(y_hat)
        adv = sum(F.relu(1 - f).mean() for f, _ in d_fake)
        feat = sum(
            F.l1_loss(ff, fr.detach())
            for (_, fr_l), (_, ff_l) in zip(d_real, d_fake, strict=True)
            for fr, ff in zip(fr_l, ff_l, strict=True)
        )
    loss_g = adv + feat + F.l1_loss(y_hat.float(), y) + spectral_loss(y, y_hat) + commit
    opt_g.zero_grad(set_to_none=True)
    (scaler.scale(loss_g) if scaler else loss_g).backward()
    if scaler:
        scaler.step(opt_g)
        scaler.update()
    else:
        opt_g.step()
    return loss_d.item(), loss_g.item(), commit.item()


# phase 1: bf16 autocast, fused AdamW
for module in (encoder, decoder, rvq, disc):
    module.train()
for i in range(3):
    ld, lg, lc = step(B1, torch.bfloat16)
    print(f"bf16 step {i} loss_d {ld:.3f} loss_g {lg:.3f} commit {lc:.4f}")
report("bf16 fused adamw rvq ema")

# phase 2: encode / decode 10-s clips
for module in (encoder, decoder, rvq):
    module.eval()
with torch.inference_mode():
    audio = torch.rand(EVAL_CLIPS, 1, SR * EVAL_SECONDS if not SMALL else SEG, device=device) - 0.5
    z = encoder(audio)
    _, codes, _ = rvq(z)
    print(f"codes {tuple(codes.shape)} {codes.dtype}")
    recon = decoder(rvq.decode(codes))
    print(f"reconstruction {tuple(recon.shape)} l1 {F.l1_loss(recon, audio).item():.4f}")
del audio, z, codes, recon
report("inference_mode encode decode 10 s")

# phase 3: fp16 GradScaler, checkpointed stages, quantizer dropout
for module in (encoder, decoder, rvq):
    module.train()
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
for i in range(3):
    n_q = rng.randint(1, N_Q)
    ld, lg, lc = step(B3, torch.float16, scaler if device == "cuda" else None, ckpt=True, n_q=n_q)
    print(
        f"fp16 step {i} n_q {n_q} loss_d {ld:.3f} loss_g {lg:.3f} commit {lc:.4f} "
        f"scale {scaler.get_scale() if device == 'cuda' else 1.0}"
    )
report("fp16 gradscaler checkpoint quantizer dropout")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
