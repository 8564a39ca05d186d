"""Glow-TTS-like: a transformer text encoder (6 layers, d 192, 2 heads, SDPA with a key-padding mask, conv1d
feed-forward) predicting a per-phoneme prior mean and log-std, a flow decoder of 8 blocks (ActNorm, a
channel flip, an affine coupling layer whose scale/shift net is a 4-layer gated dilated conv1d WaveNet)
mapping 80-bin mels to latents with their log-determinant, and the monotonic alignment search (MAS) by a
dynamic-programming loop in torch over the mel frames (no_grad: the cumulative log-likelihood
[B, T_text] updated by torch.maximum of the stay / advance paths, then the back-tracked path as a one-hot
[B, T_text, T_mel] matrix built column by column). Durations from the path feed a duration predictor.

fp32 AdamW at batch 64, 96 phonemes, 384 frames. Phases: 2 training steps; no_grad synthesis with the
reverse flow (durations fixed at 4 frames each) at batch 128; 2 training steps under bf16 autocast with
every flow block under non-reentrant checkpointing (MAS stays fp32). 3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2233)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, T_TXT, T_MEL, D = (2, 8, 24, 32) if SMALL else (64, 96, 384, 192)
MEL, VOCAB, HID = 80, 60, 192


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
              f"reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class EncLayer(nn.Module):
    def __init__(self, d, h=2):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.f1 = nn.Conv1d(d, 4 * d, 3, padding=1)
        self.f2 = nn.Conv1d(4 * d, d, 3, padding=1)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        x = self.n1(x + F.dropout(self.o(a.transpose(1, 2).reshape(b, t, d)), 0.1, self.training))
        m = mask[:, None, :].to(x.dtype)
        y = self.f2(F.relu(self.f1(x.transpose(1, 2) * m)) * m) * m
        return self.n2(x + F.dropout(y.transpose(1, 2), 0.1, self.training))


class TextEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(EncLayer(D) for _ in range(6))
        self.stats = nn.Linear(D, 2 * MEL)
        self.dp = nn.Sequential(nn.Conv1d(D, 256, 3, padding=1), nn.ReLU(), nn.Conv1d(256, 256, 3, padding=1), nn.ReLU(), nn.Conv1d(256, 1, 1))

    def forward(self, txt, mask):
        x = self.emb(txt) * math.sqrt(D)
        for layer in self.layers:
            x = layer(x, mask)
        mu, logs = self.stats(x).chunk(2, -1)
        logw = self.dp(x.detach().transpose(1, 2)).squeeze(1)
        return mu, logs, logw


class ActNorm(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.logs = nn.Parameter(torch.zeros(1, c, 1))
        self.bias = nn.Parameter(torch.zeros(1, c, 1))

    def forward(self, x, reverse=False):
        if reverse:
            return (x - self.bias) * torch.exp(-self.logs), None
        return x * torch.exp(self.logs) + self.bias, self.logs.sum() * x.shape[2]


class Coupling(nn.Module):
    def __init__(self, c, hid=HID, layers=4):
        super().__init__()
        self.pre = nn.Conv1d(c // 2, hid, 1)
        self.ins = nn.ModuleList(nn.Conv1d(hid, 2 * hid, 5, padding=2 ** i * 2, dilation=2 ** i) for i in range(layers))
        self.res = nn.ModuleList(nn.Conv1d(hid, hid, 1) for _ in range(layers))
        self.post = nn.Conv1d(hid, c, 1)
        nn.init.zeros_(self.post.weight)
        nn.init.zeros_(self.post.bias)

    def forward(self, x, reverse=False):
        xa, xb = x.chunk(2, 1)
        h = self.pre(xa)
        out = 0
        for conv, res in zip(self.ins, self.res):
            a, g = conv(h).chunk(2, 1)
            z = torch.tanh(a) * torch.sigmoid(g)
            h = h + res(z)
            out = out + z
        m, logs = self.post(out).chunk(2, 1)
        if reverse:
            return torch.cat([xa, (xb - m) * torch.exp(-logs)], 1), None
        return torch.cat([xa, m + xb * torch.exp(logs)], 1), logs.sum(dim=(1, 2))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = ActNorm(c)
        self.coup = Coupling(c)

    def forward(self, x):
        x, ld1 = self.norm(x)
        x = torch.flip(x, [1])
        x, ld2 = self.coup(x)
        return x, ld1 + ld2

    def reverse(self, x):
        x, _ = self.coup(x, reverse=True)
        x = torch.flip(x, [1])
        return self.norm(x, reverse=True)[0]


@torch.no_grad()
def mas(logp, t_mask):
    """logp [B, T_text, T_mel]; a monotonic path maximising the summed log-likelihood."""
    b, tx, ty = logp.shape
    neg = -1e9
    value = torch.full((b, tx), neg, device=logp.device)
    value[:, 0] = logp[:, 0, 0]
    choices = torch.zeros(b, tx, ty, dtype=torch.bool, device=logp.device)
    for j in range(1, ty):
        prev = torch.cat([value.new_full((b, 1), neg), value[:, :-1]], 1)
        adv = prev > value
        choices[:, :, j] = adv
        value = torch.maximum(value, prev) + logp[:, :, j]
    lens = t_mask.sum(1)
    idx = lens - 1
    path = torch.zeros(b, tx, ty, device=logp.device)
    ar = torch.arange(b, device=logp.device)
    for j in range(ty - 1, -1, -1):
        path[ar, idx, j] = 1.0
        idx = (idx - choices[ar, idx, j].long()).clamp_min(0)
    return path


enc = TextEncoder().to(device)
flow = nn.ModuleList(Block(MEL) for _ in range(8)).to(device)
params = list(enc.parameters()) + list(flow.parameters())
opt = torch.optim.AdamW(params, lr=2e-4, betas=(0.9, 0.98), weight_decay=0.01)
print("params", sum(p.numel() for p in params))


def train_step(ckpt=False):
    txt = torch.randint(1, VOCAB, (B, T_TXT), device=device)
    t_mask = torch.ones(B, T_TXT, dtype=torch.bool, device=device)
    t_mask[B // 2:, 3 * T_TXT // 4:] = False
    mel = torch.randn(B, MEL, T_MEL, device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=ckpt):
        mu, logs, logw = enc(txt, t_mask)
        z, logdet = mel, 0
        for blk in flow:
            z, ld = checkpoint(blk, z, use_reentrant=False) if ckpt else blk(z)
            logdet = logdet + ld
    z, mu, logs = z.float(), mu.float(), logs.float()
    with torch.no_grad():
        s = torch.exp(-2 * logs)  # [B, Tx, C]
        logp = (-0.5 * math.log(2 * math.pi) - logs).sum(-1)[:, :, None] \
            - 0.5 * torch.bmm(s, z ** 2) + torch.bmm(mu * s, z) - 0.5 * (mu ** 2 * s).sum(-1)[:, :, None]
        logp = logp.masked_fill(~t_mask[:, :, None], -1e9)
        path = mas(logp, t_mask)
    mu_y = torch.bmm(path.transpose(1, 2), mu).transpose(1, 2)
    logs_y = torch.bmm(path.transpose(1, 2), logs).transpose(1, 2)
    nll = (logs_y + 0.5 * torch.exp(-2 * logs_y) * (z - mu_y) ** 2).sum() - logdet.float().sum()
    nll = nll / (B * MEL * T_MEL)
    dur = torch.log(path.sum(2) + 1e-8) * t_mask
    l_dur = F.mse_loss(logw.float() * t_mask, dur)
    loss = nll + l_dur
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 5.0)
    opt.step()
    return loss.item()


for step in range(2):
    print("step", step, train_step())
report("train_fp32")

enc.eval()
flow.eval()
with torch.no_grad():
    b2 = 2 * B
    txt = torch.randint(1, VOCAB, (b2, T_TXT), device=device)
    t_mask = torch.ones(b2, T_TXT, dtype=torch.bool, device=device)
    mu, logs, logw = enc(txt, t_mask)
    dur = torch.full((b2, T_TXT), 4, device=device)
    mu_y = torch.stack([torch.repeat_interleave(mu[i], dur[i], 0) for i in range(b2)]).transpose(1, 2)
    logs_y = torch.stack([torch.repeat_interleave(logs[i], dur[i], 0) for i in range(b2)]).transpose(1, 2)
    z = mu_y + torch.randn_like(mu_y) * torch.exp(logs_y) * 0.667
    for blk in reversed(flow):
        z = blk.reverse(z)
    print("synth mel", tuple(z.shape), z.abs().mean().item())
    del z, mu_y, logs_y
report("reverse_flow_synthesis")

enc.train()
flow.train()
for step in range(2):
    print("bf16 ckpt step", step, train_step(ckpt=True))
report("train_bf16_checkpointing")
