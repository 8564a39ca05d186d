"""DPRNN (Luo, Chen & Yoshioka 2020) in the configuration Asteroid's DPRNNTasNet uses: a Conv1d encoder of
64 filters (kernel 16, stride 8), a gLN + 1 x 1 bottleneck to 128 channels, the sequence cut into chunks of
100 frames with hop 50 by F.unfold (the end padded by one chunk on each side, as Asteroid's
DualPathProcessing.unfold does), 6 dual-path blocks each of an intra-chunk bidirectional LSTM (128 hidden
units per direction) + Linear + gLN with a residual, then an inter-chunk bidirectional LSTM across the
chunks with the same shape; a PReLU + 2-D 1 x 1 conv to two masks of 128 channels, the chunks folded back
by F.fold (overlap-add, divided by the window count), a gated output (tanh * sigmoid 1 x 1 convs), a 1 x 1
conv to the 64 encoder channels with a ReLU mask, and a ConvTranspose1d decoder.

Data: two-speaker 8 kHz mixtures of 4 seconds at batch 8, drawn on the device. Loss: negative SI-SNR
under permutation-invariant training (both permutations, the best per utterance). Training under fp16
autocast with torch.amp.GradScaler, Adam (lr 1e-3), scaler.unscale_ and gradient clipping at 5.

Phases: the first step; 3 more steps; a no_grad validation pass at batch 16 under fp16 autocast; then a
30-second mixture separated in one piece under torch.inference_mode with fp16 autocast, the estimates
moved to the host. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19002)
if SMALL:
    BATCH, SEG, HID, REPEATS, STEPS, VAL_BATCH, LONG = 2, 4000, 16, 2, 1, 2, 8000
else:
    BATCH, SEG, HID, REPEATS, STEPS, VAL_BATCH, LONG = 8, 32000, 128, 6, 3, 16, 240000
N_FILTERS, KERNEL, STRIDE, BN_CHAN, CHUNK, HOP, N_SRC = 64, 16, 8, 128, 100, 50, 2
EPS = 1e-8
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class GlobLN(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x):
        # x: [batch, channels, *]
        dims = list(range(1, x.dim()))
        mean = x.mean(dim=dims, keepdim=True)
        var = (x - mean).pow(2).mean(dim=dims, keepdim=True)
        shape = [1, -1] + [1] * (x.dim() - 2)
        return self.gamma.view(shape) * (x - mean) / (var + EPS).sqrt() + self.beta.view(shape)


class DPRNNBlock(nn.Module):
    def __init__(self, channels, hidden):
        super().__init__()
        self.intra_rnn = nn.LSTM(channels, hidden, batch_first=True, bidirectional=True)
        self.intra_linear = nn.Linear(2 * hidden, channels)
        self.intra_norm = GlobLN(channels)
        self.inter_rnn = nn.LSTM(channels, hidden, batch_first=True, bidirectional=True)
        self.inter_linear = nn.Linear(2 * hidden, channels)
        self.inter_norm = GlobLN(channels)

    def forward(self, x):
        # x: [batch, channels, chunk, n_chunks]
        b, c, k, s = x.shape
        intra = x.permute(0, 3, 2, 1).reshape(b * s, k, c)
        intra, _ = self.intra_rnn(intra)
        intra = self.intra_linear(intra).reshape(b, s, k, c).permute(0, 3, 2, 1)
        x = x + self.intra_norm(intra)
        inter = x.permute(0, 2, 3, 1).reshape(b * k, s, c)
        inter, _ = self.inter_rnn(inter)
        inter = self.inter_linear(inter).reshape(b, k, s, c).permute(0, 3, 1, 2)
        return x + self.inter_norm(inter)


class DPRNNTasNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, N_FILTERS, KERNEL, stride=STRIDE, padding=KERNEL // 2, bias=False)
        self.in_norm = GlobLN(N_FILTERS)
        self.bottleneck = nn.Conv1d(N_FILTERS, BN_CHAN, 1)
        self.blocks = nn.ModuleList(DPRNNBlock(BN_CHAN, HID) for _ in range(REPEATS))
        self.prelu = nn.PReLU()
        self.first_out = nn.Conv2d(BN_CHAN, N_SRC * BN_CHAN, 1)
        self.net_out = nn.Conv1d(BN_CHAN, BN_CHAN, 1)
        self.net_gate = nn.Conv1d(BN_CHAN, BN_CHAN, 1)
        self.mask_net = nn.Conv1d(BN_CHAN, N_FILTERS, 1, bias=False)
        self.decoder = nn.ConvTranspose1d(
            N_FILTERS, 1, KERNEL, stride=STRIDE, padding=KERNEL // 2, bias=False
        )

    def forward(self, wav):
        batch, samples = wav.shape
        tf = self.encoder(wav.unsqueeze(1))  # [batch, N, frames]
        frames = tf.shape[-1]
        y = self.bottleneck(self.in_norm(tf))
        unfolded = F.unfold(
            y.unsqueeze(-1), kernel_size=(CHUNK, 1), padding=(CHUNK, 0), stride=(HOP, 1)
        )  # [batch, C * CHUNK, n_chunks]
        n_chunks = unfolded.shape[-1]
        y = unfolded.reshape(batch, BN_CHAN, CHUNK, n_chunks)
        for block in self.blocks:
            y = block(y)
        y = self.first_out(self.prelu(y))  # [batch, N_SRC * C, CHUNK, n_chunks]
        y = y.reshape(batch * N_SRC, BN_CHAN * CHUNK, n_chunks)
        y = F.fold(y, (frames, 1), kernel_size=(CHUNK, 1), padding=(CHUNK, 0), stride=(HOP, 1))
        y = y.reshape(batch * N_SRC, BN_CHAN, frames) / (CHUNK / HOP)
        y = torch.tanh(self.net_out(y)) * torch.sigmoid(self.net_gate(y))
        masks = F.relu(self.mask_net(y)).view(batch, N_SRC, N_FILTERS, frames)
        masked = (tf.unsqueeze(1) * masks).view(batch * N_SRC, N_FILTERS, frames)
        est = self.decoder(masked).view(batch, N_SRC, -1)
        return est[..., :samples]


def si_snr(est, ref):
    est = est - est.mean(-1, keepdim=True)
    ref = ref - ref.mean(-1, keepdim=True)
    target = (est * ref).sum(-1, keepdim=True) / (ref.pow(2).sum(-1, keepdim=True) + EPS) * ref
    return 10 * torch.log10(target.pow(2).sum(-1) / ((est - target).pow(2).sum(-1) + EPS) + EPS)


def pit_loss(est, ref):
    direct = si_snr(est, ref).mean(-1)
    swapped = si_snr(est, ref.flip(1)).mean(-1)
    return -torch.maximum(direct, swapped).mean()


def batch(bsz, samples):
    sources = torch.randn(bsz, N_SRC, samples, device=device) * 0.1
    return sources.sum(1), sources


model = DPRNNTasNet().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda", enabled=amp)


def train_step():
    mix, ref = batch(BATCH, SEG)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        est = model(mix)
    loss = pit_loss(est.float(), ref)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(opt)
    scaler.update()
    return loss.item(), gn.item()


model.train()
loss, gn = train_step()
print(f"step 0 loss {loss:.3f} grad norm {gn:.2f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    loss, gn = train_step()
    print(f"step {step} loss {loss:.3f} grad norm {gn:.2f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    mix, ref = batch(VAL_BATCH, SEG)
    val_loss = pit_loss(model(mix).float(), ref)
print(f"val loss {val_loss.item():.3f}")
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    mix, _ = batch(1, LONG)
    separated = model(mix).float().cpu()
print(f"separated {tuple(separated.shape)} rms {separated.pow(2).mean().sqrt():.4f}")
if device == "cuda":
    print(
        f"long allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
