"""A WaveNet vocoder by hand (mu-law classes, local mel conditioning) on random data.

Model: 256 mu-law classes embedded to 128 channels, a causal Conv1d (k 2), 30 residual layers (3 stacks
of dilations 1 .. 512): causal dilated Conv1d (k 2, left padding) 128 -> 512 plus a 1x1 Conv1d of the
upsampled mel 80 -> 512, gated tanh x sigmoid over the two halves, 1x1 Conv1d to residual (128) and skip
(256) channels; ReLU, 1x1 Conv1d 256 -> 256, ReLU, 1x1 Conv1d 256 -> 256 logits. The mel (80 bands, hop
256) upsampled by two ConvTranspose1d of stride 16 (kernel 32) with leaky ReLU.
Phase 1: teacher-forced training on random classes, batch 8 x 8,000 samples, F.cross_entropy over
(B, 256, T), bf16 autocast, foreach Adam, 3 steps.
Phase 2: incremental (fast WaveNet) sampling under inference_mode and bf16 autocast: per-layer input
queues kept by torch.cat of the last dilation + 1 steps, the convolutions of one step as F.linear on the
queue's first and last columns, torch.multinomial over the softmax, 400 samples at batch 16.
Phase 3: fp16 autocast with GradScaler, every residual layer under torch.utils.checkpoint
(non-reentrant), scaler.unscale_ and clip_grad_norm_ 1.0, fused AdamW, batch 16 x 8,000, 2 steps.
3 phases after the model's."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21505)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
CLASSES, MELS, HOP = 256, 80, 256
RES, GATE, SKIP, STACKS, CYCLE = (128, 512, 256, 3, 10) if not SMALL else (16, 32, 16, 1, 4)
B1, B3, T, SAMPLE_B, SAMPLE_STEPS = (8, 16, 8000, 16, 400) if not SMALL else (2, 2, 512, 2, 20)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class ResidualLayer(nn.Module):
    def __init__(self, dilation):
        super().__init__()
        self.dilation = dilation
        self.conv = nn.Conv1d(RES, GATE, 2, dilation=dilation)
        self.cond = nn.Conv1d(MELS, GATE, 1, bias=False)
        self.res = nn.Conv1d(GATE // 2, RES, 1)
        self.skip = nn.Conv1d(GATE // 2, SKIP, 1)

    def forward(self, x, c):
        h = self.conv(F.pad(x, (self.dilation, 0))) + self.cond(c)
        a, b = h.chunk(2, dim=1)
        z = torch.tanh(a) * torch.sigmoid(b)
        return (x + self.res(z)) * 0.7071067811865476, self.skip(z)

    def step(self, queue, c):  # queue (B, RES, dilation + 1): [x_{t-d}, ..., x_t]; c (B, MELS)
        w = self.conv.weight  # (GATE, RES, 2)
        h = F.linear(queue[:, :, 0], w[:, :, 0]) + F.linear(queue[:, :, -1], w[:, :, 1], self.conv.bias)
        h = h + F.linear(c, self.cond.weight.squeeze(-1))
        a, b = h.chunk(2, dim=1)
        z = torch.tanh(a) * torch.sigmoid(b)
        x = queue[:, :, -1]
        res = (x + F.linear(z, self.res.weight.squeeze(-1), self.res.bias)) * 0.7071067811865476
        return res, F.linear(z, self.skip.weight.squeeze(-1), self.skip.bias)


class WaveNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(CLASSES, RES)
        self.first = nn.Conv1d(RES, RES, 2)
        self.layers = nn.ModuleList(ResidualLayer(2**i) for _ in range(STACKS) for i in range(CYCLE))
        self.out1 = nn.Conv1d(SKIP, SKIP, 1)
        self.out2 = nn.Conv1d(SKIP, CLASSES, 1)
        self.up = nn.ModuleList(
            [
                nn.ConvTranspose1d(MELS, MELS, 32, 16, padding=8),
                nn.ConvTranspose1d(MELS, MELS, 32, 16, padding=8),
            ]
        )

    def upsample(self, mel):
        for up in self.up:
            mel = F.leaky_relu(up(mel), 0.4)
        return mel

    def forward(self, classes, mel, ckpt=False):
        c = self.upsample(mel)[..., : classes.shape[1]]
        x = self.first(F.pad(self.embed(classes).transpose(1, 2), (1, 0)))
        skips = 0
        for layer in self.layers:
            x, s = checkpoint(layer, x, c, use_reentrant=False) if ckpt else layer(x, c)
            skips = skips + s
        return self.out2(F.relu(self.out1(F.relu(skips))))


model = WaveNet().to(device)
print(
    f"wavenet parameters {sum(p.numel() for p in model.parameters())}, "
    f"receptive field {sum(layer.dilation for layer in model.layers) + 2}"
)
report("model")


def batch(b):
    classes = torch.randint(0, CLASSES, (b, T + 1), device=device)
    mel = torch.randn(b, MELS, T // HOP + 1, device=device)
    return classes[:, :-1], classes[:, 1:], mel


# phase 1: teacher forcing, bf16 autocast, foreach Adam
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
model.train()
for step in range(3):
    inputs, targets, mel = batch(B1)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
        logits = model(inputs, mel)
        loss = F.cross_entropy(logits, targets)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"bf16 step {step} loss {loss.item():.4f}")
    del logits, loss
report("teacher forcing bf16 foreach adam")

# phase 2: incremental sampling
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
    mel = torch.randn(SAMPLE_B, MELS, SAMPLE_STEPS // HOP + 2, device=device)
    cond = model.upsample(mel)[..., :SAMPLE_STEPS].transpose(1, 2)  # (B, steps, MELS)
    queues = [torch.zeros(SAMPLE_B, RES, layer.dilation + 1, device=device) for layer in model.layers]
    prev_embed = torch.zeros(SAMPLE_B, RES, device=device)
    current = torch.full((SAMPLE_B,), CLASSES // 2, dtype=torch.long, device=device)
    samples = []
    for t in range(SAMPLE_STEPS):
        e = model.embed(current)
        w = model.first.weight
        x = F.linear(prev_embed, w[:, :, 0]) + F.linear(e, w[:, :, 1], model.first.bias)
        prev_embed = e
        skips = 0
        for j, layer in enumerate(model.layers):
            queues[j] = torch.cat((queues[j][:, :, 1:], x.unsqueeze(-1).to(queues[j].dtype)), dim=2)
            x, s = layer.step(queues[j], cond[:, t])
            skips = skips + s
        h = F.relu(F.linear(F.relu(skips), model.out1.weight.squeeze(-1), model.out1.bias))
        logits = F.linear(h, model.out2.weight.squeeze(-1), model.out2.bias)
        current = torch.multinomial(F.softmax(logits.float(), dim=-1), 1).squeeze(1)
        samples.append(current)
    wave = torch.stack(samples, dim=1)
print(f"sampled {tuple(wave.shape)} mean class {wave.float().mean().item():.1f}")
del mel, cond, queues, samples, wave, prev_embed, current, x, skips, h, logits
report("incremental sampling inference_mode")

# phase 3: fp16 GradScaler, checkpointed layers, fused AdamW
del opt
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, fused=device == "cuda")
scaler = torch.amp.GradScaler("cuda", enabled=amp)
model.train()
for step in range(2):
    inputs, targets, mel = batch(B3)
    with torch.autocast(device, dtype=torch.float16, enabled=amp):
        logits = model(inputs, mel, ckpt=True)
        loss = F.cross_entropy(logits.float(), targets)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    print(f"fp16 step {step} loss {loss.item():.4f} grad norm {norm.item():.3f} scale {scaler.get_scale()}")
    del logits, loss
report("fp16 gradscaler checkpoint fused adamw")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
