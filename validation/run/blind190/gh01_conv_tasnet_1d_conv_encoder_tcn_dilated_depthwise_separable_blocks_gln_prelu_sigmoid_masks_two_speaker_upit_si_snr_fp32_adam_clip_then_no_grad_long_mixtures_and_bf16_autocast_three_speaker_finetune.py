"""Conv-TasNet (Luo & Mesgarani 2019) written by hand, the non-causal configuration of the paper's best
row: a 1-D convolutional encoder of N = 512 filters of length L = 16 (stride 8) with a ReLU, a separator of
a global layer norm (gLN), a 1 x 1 bottleneck to B = 128 channels and a temporal convolutional network of
R = 3 repeats of X = 8 blocks (1 x 1 conv to H = 512, PReLU, gLN, dilated depthwise conv of kernel P = 3
with dilations 1 .. 128, PReLU, gLN, then a residual 1 x 1 conv and a skip-connection 1 x 1 conv of B = 128
channels each), the summed skip connections through PReLU and a 1 x 1 conv to C * N sigmoid masks, and a
ConvTranspose1d decoder (overlap-add) back to the waveform.

Data: 4-second 8 kHz two-speaker mixtures (32,000 samples) at batch 6, made on the device as the sum of
two random sources. Loss: utterance-level permutation-invariant training over the negative scale-invariant
SNR (zero-mean signals, all C! speaker permutations of the pairwise SI-SNR matrix, the best one per
utterance). Training in fp32 with Adam (lr 1e-3) and gradient clipping at norm 5.

Phases: the first step; 3 more steps; evaluation under torch.no_grad on 4 longer mixtures of 12 seconds
(96,000 samples) one at a time, printing the SI-SNR improvement; then a three-speaker model (C = 3, the
mask layer rebuilt, the rest of the weights kept) fine-tuned for 2 steps under bf16 autocast with a fresh
Adam, at batch 4. 4 phases."""

import itertools
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19001)
if SMALL:
    BATCH, SEG, N, B, H, X, R, STEPS, EVAL_N, EVAL_SEG, FT_BATCH = 2, 4000, 64, 32, 64, 3, 2, 1, 1, 8000, 2
else:
    BATCH, SEG, N, B, H, X, R, STEPS, EVAL_N, EVAL_SEG, FT_BATCH = (
        6,
        32000,
        512,
        128,
        512,
        8,
        3,
        3,
        4,
        96000,
        4,
    )
L = 16
P = 3
EPS = 1e-8
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class GlobalLayerNorm(nn.Module):
    """gLN: normalise over both channel and time, per utterance."""

    def __init__(self, channels):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(1, channels, 1))
        self.beta = nn.Parameter(torch.zeros(1, channels, 1))

    def forward(self, x):
        mean = x.mean(dim=(1, 2), keepdim=True)
        var = ((x - mean) ** 2).mean(dim=(1, 2), keepdim=True)
        return self.gamma * (x - mean) / torch.sqrt(var + EPS) + self.beta


class TemporalBlock(nn.Module):
    def __init__(self, b, h, p, dilation):
        super().__init__()
        self.conv1x1 = nn.Conv1d(b, h, 1)
        self.prelu1 = nn.PReLU()
        self.norm1 = GlobalLayerNorm(h)
        pad = (p - 1) * dilation // 2
        self.dconv = nn.Conv1d(h, h, p, padding=pad, dilation=dilation, groups=h)
        self.prelu2 = nn.PReLU()
        self.norm2 = GlobalLayerNorm(h)
        self.res_out = nn.Conv1d(h, b, 1)
        self.skip_out = nn.Conv1d(h, b, 1)

    def forward(self, x):
        y = self.norm1(self.prelu1(self.conv1x1(x)))
        y = self.norm2(self.prelu2(self.dconv(y)))
        return x + self.res_out(y), self.skip_out(y)


class ConvTasNet(nn.Module):
    def __init__(self, n=N, kernel=L, b=B, h=H, p=P, x=X, r=R, c=2):
        super().__init__()
        self.n, self.c = n, c
        self.encoder = nn.Conv1d(1, n, kernel, stride=kernel // 2, bias=False)
        self.ln = GlobalLayerNorm(n)
        self.bottleneck = nn.Conv1d(n, b, 1)
        self.blocks = nn.ModuleList(TemporalBlock(b, h, p, 2**i) for _ in range(r) for i in range(x))
        self.mask_prelu = nn.PReLU()
        self.mask_conv = nn.Conv1d(b, c * n, 1)
        self.decoder = nn.ConvTranspose1d(n, 1, kernel, stride=kernel // 2, bias=False)

    def forward(self, mix):
        # mix: [batch, samples]
        w = F.relu(self.encoder(mix.unsqueeze(1)))  # [batch, N, frames]
        y = self.bottleneck(self.ln(w))
        skip_sum = 0
        for block in self.blocks:
            y, skip = block(y)
            skip_sum = skip_sum + skip
        masks = torch.sigmoid(self.mask_conv(self.mask_prelu(skip_sum)))
        masks = masks.view(mix.shape[0], self.c, self.n, -1)
        masked = w.unsqueeze(1) * masks  # [batch, C, N, frames]
        est = self.decoder(masked.view(mix.shape[0] * self.c, self.n, -1))
        est = est.view(mix.shape[0], self.c, -1)
        return F.pad(est, (0, mix.shape[-1] - est.shape[-1]))


def si_snr(est, ref):
    est = est - est.mean(dim=-1, keepdim=True)
    ref = ref - ref.mean(dim=-1, keepdim=True)
    proj = (est * ref).sum(-1, keepdim=True) * ref / (ref.pow(2).sum(-1, keepdim=True) + EPS)
    noise = est - proj
    return 10 * torch.log10(proj.pow(2).sum(-1) / (noise.pow(2).sum(-1) + EPS) + EPS)


def pit_si_snr_loss(est, ref):
    """est, ref: [batch, C, T]; the best permutation per utterance (uPIT)."""
    c = est.shape[1]
    pair = si_snr(est.unsqueeze(2), ref.unsqueeze(1))  # [batch, C_est, C_ref]
    perms = list(itertools.permutations(range(c)))
    scores = torch.stack([pair[:, torch.arange(c), list(p)].mean(-1) for p in perms], dim=1)
    best, _ = scores.max(dim=1)
    return -best.mean()


def make_batch(bsz, samples, c):
    sources = torch.randn(bsz, c, samples, device=device) * torch.rand(bsz, c, 1, device=device)
    return sources.sum(1), sources


model = ConvTasNet().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def train_step(net, optimizer, bsz, c, autocast=False):
    mix, ref = make_batch(bsz, SEG, c)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and amp):
        est = net(mix)
    loss = pit_si_snr_loss(est.float(), ref)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)
    optimizer.step()
    return loss.item(), gn.item()


model.train()
loss, gn = train_step(model, opt, BATCH, 2)
print(f"step 0 loss {loss:.3f} grad norm {gn:.2f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    loss, gn = train_step(model, opt, BATCH, 2)
    print(f"step {step} loss {loss:.3f} grad norm {gn:.2f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
improvements = []
with torch.no_grad():
    for _ in range(EVAL_N):
        mix, ref = make_batch(1, EVAL_SEG, 2)
        est = model(mix)
        pair = si_snr(est.unsqueeze(2), ref.unsqueeze(1))
        best = max(pair[0, torch.arange(2), list(p)].mean() for p in itertools.permutations(range(2)))
        base = si_snr(mix.unsqueeze(1).expand_as(ref), ref).mean()
        improvements.append((best - base).item())
print(f"eval SI-SNRi {sum(improvements) / len(improvements):.2f} dB")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# Three-speaker fine-tuning: a new mask layer, everything else kept.
model.c = 3
model.mask_conv = nn.Conv1d(B, 3 * N, 1).to(device)
opt3 = torch.optim.Adam(model.parameters(), lr=5e-4)
del opt
model.train()
for step in range(2):
    loss, gn = train_step(model, opt3, FT_BATCH, 3, autocast=True)
    print(f"3-speaker step {step} loss {loss:.3f} grad norm {gn:.2f}")
if device == "cuda":
    print(
        f"finetune allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
