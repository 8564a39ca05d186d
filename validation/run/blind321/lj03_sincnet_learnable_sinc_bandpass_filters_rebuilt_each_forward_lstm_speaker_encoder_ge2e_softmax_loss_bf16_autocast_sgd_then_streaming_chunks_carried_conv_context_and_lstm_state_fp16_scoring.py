"""Speaker verification by hand: a SincNet front end (80 learnable band-pass filters of 251 taps whose
low cut-offs and bandwidths are parameters; the filter bank is rebuilt from them at every forward as
the difference of two windowed sincs with a Hamming window, then conv1d with stride 1 over raw 16 kHz
audio, abs, max-pool 3, layer norm, two more plain conv1d blocks with leaky ReLU), a 3-layer LSTM of
384 units and a linear projection to a 256-d d-vector (L2-normalised): the GE2E softmax loss
(speakers x utterances batches of 32 x 8, 1.6 s windows, centroids with the utterance itself left
out by hand, learnable scale w and bias b, cross entropy over speakers). fp32 weights, bf16 autocast,
SGD with momentum, gradient clipping, w clamped after each step, 3 steps. Then streaming
enrolment in fp32 under no_grad: 16 recordings of 6 s fed in 200 ms chunks, each chunk's convolution
seeing the previous chunk's last samples (the receptive field carried by hand) and the LSTM's (h, c)
carried across chunks; the d-vector of the last state; and a batched cosine score matrix.

Phases: 0 model and optimizer built; 1 first step; 2 two more steps; 3 streaming enrolment of 16
recordings; 4 scoring of 256 trial utterances of 2 s in fp16 autocast."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(3213)
device = "cuda"
SR = 16000


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class SincConv(nn.Module):
    def __init__(self, n_filters=80, taps=251, sr=SR, min_low=50.0, min_band=50.0):
        super().__init__()
        self.taps, self.sr, self.min_low, self.min_band = taps, sr, min_low, min_band
        mel = torch.linspace(
            2595 * math.log10(1 + 30 / 700), 2595 * math.log10(1 + (sr / 2 - 100) / 700), n_filters + 1
        )
        hz = 700 * (10 ** (mel / 2595) - 1)
        self.low_hz = nn.Parameter(hz[:-1].view(-1, 1))
        self.band_hz = nn.Parameter(torch.diff(hz).view(-1, 1))
        n = torch.linspace(0, taps / 2 - 1, taps // 2)
        self.register_buffer("window", 0.54 - 0.46 * torch.cos(2 * math.pi * n / taps))
        self.register_buffer("n", 2 * math.pi * torch.arange(-(taps - 1) / 2, 0).view(1, -1) / sr)

    def filters(self):
        low = self.min_low + self.low_hz.abs()
        high = torch.clamp(low + self.min_band + self.band_hz.abs(), self.min_low, self.sr / 2)
        band = (high - low)[:, 0]
        left = (torch.sin(high * self.n) - torch.sin(low * self.n)) / (self.n / 2) * self.window
        center = 2 * band.view(-1, 1)
        right = left.flip(1)
        bank = torch.cat([left, center, right], 1) / (2 * band[:, None])
        return bank.view(-1, 1, self.taps)

    def forward(self, x):
        return F.conv1d(x, self.filters())


class SpeakerEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.sinc = SincConv()
        self.norm0 = nn.LayerNorm(80)
        self.conv1 = nn.Conv1d(80, 60, 5)
        self.norm1 = nn.LayerNorm(60)
        self.conv2 = nn.Conv1d(60, 60, 5)
        self.norm2 = nn.LayerNorm(60)
        self.lstm = nn.LSTM(60, 384, num_layers=3, batch_first=True)
        self.proj = nn.Linear(384, 256)
        self.receptive = 251 - 1 + 3 * (5 - 1) * 3 + 3 * 3 * 3 * (5 - 1)

    def frames(self, wav):
        x = F.max_pool1d(self.sinc(wav[:, None]).abs(), 3)
        x = F.leaky_relu(self.norm0(x.transpose(1, 2)).transpose(1, 2), 0.2)
        x = F.max_pool1d(self.conv1(x), 3)
        x = F.leaky_relu(self.norm1(x.transpose(1, 2)).transpose(1, 2), 0.2)
        x = F.max_pool1d(self.conv2(x), 3)
        x = F.leaky_relu(self.norm2(x.transpose(1, 2)), 0.2)
        return x

    def forward(self, wav, state=None):
        out, state = self.lstm(self.frames(wav), state)
        return F.normalize(self.proj(out[:, -1]), dim=-1), state


def ge2e_loss(emb, w, b):
    spk, utt, _ = emb.shape
    total = emb.sum(1)
    centroids = F.normalize(total / utt, dim=-1)
    excl = F.normalize((total[:, None] - emb) / (utt - 1), dim=-1)
    sim = torch.einsum("sud,kd->suk", emb, centroids)
    self_sim = (emb * excl).sum(-1)
    eye = torch.eye(spk, dtype=torch.bool, device=emb.device)[:, None, :].expand(spk, utt, spk)
    sim = torch.where(eye, self_sim[..., None].expand_as(sim), sim)
    logits = w * sim + b
    target = torch.arange(spk, device=emb.device).repeat_interleave(utt)
    return F.cross_entropy(logits.reshape(spk * utt, spk).float(), target)


model = SpeakerEncoder().to(device)
w = nn.Parameter(torch.tensor(10.0, device=device))
b = nn.Parameter(torch.tensor(-5.0, device=device))
optimizer = torch.optim.SGD([*model.parameters(), w, b], lr=0.01, momentum=0.9)
report("built")

SPK, UTT, WIN = 32, 8, int(1.6 * SR)
model.train()
for step in range(3):
    wav = torch.randn(SPK * UTT, WIN, device=device) * 0.1
    with torch.autocast("cuda", dtype=torch.bfloat16):
        emb, _ = model(wav)
        loss = ge2e_loss(emb.view(SPK, UTT, -1), w, b)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([*model.parameters(), w, b], 3.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        w.clamp_(min=1e-6)
    print(f"step {step} loss {loss.item():.4f}")
    del emb, loss, wav
    if step == 0:
        report("step0")
report("steps1-2")

model.eval()
N, SECS, CHUNK = 16, 6, int(0.2 * SR)
ctx = model.receptive
with torch.no_grad():
    recordings = torch.randn(N, SECS * SR, device=device) * 0.1
    tail = torch.zeros(N, ctx, device=device)
    state = None
    for start in range(0, SECS * SR, CHUNK):
        chunk = recordings[:, start : start + CHUNK]
        x = torch.cat([tail, chunk], 1)
        enrol, state = model(x, state)
        tail = x[:, -ctx:]
    enrol = enrol.clone()
print("enrolment", tuple(enrol.shape), tuple(state[0].shape))
del recordings, tail, state, x, chunk
report("streaming")

with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    trials = torch.randn(256, 2 * SR, device=device) * 0.1
    test, _ = model(trials)
    scores = test.float() @ enrol.T
print("scores", tuple(scores.shape), scores.dtype)
del trials, test, scores
report("scoring")
