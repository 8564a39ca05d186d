"""WaveNet (van den Oord et al. 2016) as researchers reproduce it by hand: 8-bit mu-law
quantised audio fed one-hot (256 channels), a causal 1 x 2 input convolution, 30 residual layers of
dilated causal Conv1d (kernel 2, dilations 1 ... 512 in three stacks, left padding by F.pad) with
gated tanh x sigmoid units over 2 x 128 channels, global speaker conditioning (nn.Embedding + 1 x 1
Conv1d added to the gate), 1 x 1 residual and skip outputs (skips summed over 256 channels), ReLU,
1 x 1, ReLU, 1 x 1 to 256-way logits and the softmax cross-entropy on the next sample; fp16 autocast
with GradScaler (init scale 2 ** 8), Adam, unscale + clip_grad_norm_; 3 steps at batch 6 x 16,000
samples; the validation NLL of 2 x 64,000 samples under no_grad; then fast generation (Paine et
al.'s queues: each layer keeps its last dilation + 1 inputs, torch.cat rolls them, F.conv1d on
the queue gives one step) of 4 voices for 240 samples by torch.multinomial, mu-law decoded;
6 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13901)
B, T, VB, VT, GB, GT = (2, 600, 1, 900, 2, 20) if SMALL else (6, 16000, 2, 64000, 4, 240)
Q, RES, GATE, SKIP, LAYERS, STACKS, SPK = 256, 128, 256, 256, 30, 3, 10
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def mu_law_encode(x, mu=Q - 1):
    y = torch.sign(x) * torch.log1p(mu * x.abs()) / math.log1p(mu)
    return ((y + 1) / 2 * mu + 0.5).long().clamp(0, mu)


def mu_law_decode(q, mu=Q - 1):
    y = 2 * q.float() / mu - 1
    return torch.sign(y) * ((1 + mu) ** y.abs() - 1) / mu


class CausalConv1d(nn.Conv1d):
    def __init__(self, cin, cout, k, dilation=1):
        super().__init__(cin, cout, k, dilation=dilation)
        self.left = (k - 1) * dilation

    def forward(self, x):
        return super().forward(F.pad(x, (self.left, 0)))

    def step(self, queue):
        return F.conv1d(queue, self.weight, self.bias, dilation=self.dilation)


class ResidualLayer(nn.Module):
    def __init__(self, dilation):
        super().__init__()
        self.dilated = CausalConv1d(RES, GATE, 2, dilation)
        self.cond = nn.Conv1d(16, GATE, 1, bias=False)
        self.res = nn.Conv1d(GATE // 2, RES, 1)
        self.skip = nn.Conv1d(GATE // 2, SKIP, 1)

    def gate(self, h, g):
        a, b = (h + self.cond(g)).chunk(2, dim=1)
        z = torch.tanh(a) * torch.sigmoid(b)
        return self.res(z), self.skip(z)

    def forward(self, x, g):
        r, s = self.gate(self.dilated(x), g)
        return (x + r) * math.sqrt(0.5), s


class WaveNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.speaker = nn.Embedding(SPK, 16)
        self.first = CausalConv1d(Q, RES, 2)
        per = LAYERS // STACKS
        self.layers = nn.ModuleList(ResidualLayer(2 ** (i % per)) for i in range(LAYERS))
        self.post1 = nn.Conv1d(SKIP, SKIP, 1)
        self.post2 = nn.Conv1d(SKIP, Q, 1)

    def head(self, skips):
        return self.post2(F.relu(self.post1(F.relu(skips))))

    def forward(self, q, spk):
        x = F.one_hot(q, Q).transpose(1, 2).float()
        g = self.speaker(spk).unsqueeze(-1)
        x = self.first(x)
        skips = 0
        for layer in self.layers:
            x, s = layer(x, g)
            skips = skips + s
        return self.head(skips * math.sqrt(1.0 / len(self.layers)))

    @torch.no_grad()
    def generate(self, spk, n):
        g = self.speaker(spk).unsqueeze(-1)
        b = spk.shape[0]
        cur = torch.full((b,), Q // 2, dtype=torch.long, device=spk.device)
        first_q = torch.zeros(b, Q, 2, device=spk.device)
        queues = [torch.zeros(b, RES, layer.dilated.left + 1, device=spk.device) for layer in self.layers]
        out = []
        for _t in range(n):
            first_q = torch.cat([first_q[:, :, 1:], F.one_hot(cur, Q).float().unsqueeze(-1)], dim=2)
            x = self.first.step(first_q)
            skips = 0
            for i, layer in enumerate(self.layers):
                queues[i] = torch.cat([queues[i][:, :, 1:], x.float()], dim=2)
                r, s = layer.gate(layer.dilated.step(queues[i]), g)
                x = (x + r) * math.sqrt(0.5)
                skips = skips + s
            logits = self.head(skips * math.sqrt(1.0 / len(self.layers)))[:, :, -1]
            cur = torch.multinomial(F.softmax(logits.float(), dim=-1), 1).squeeze(1)
            out.append(cur)
        return mu_law_decode(torch.stack(out, dim=1))


model = WaveNet().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler(device, init_scale=2.0**8, enabled=amp)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(b, t):
    wav = torch.tanh(torch.randn(b, t + 1, device=device) * 0.3)
    return mu_law_encode(wav), torch.randint(0, SPK, (b,), device=device)


model.train()
for step in range(3):
    q, spk = batch(B, T)
    with torch.autocast(device, dtype=torch.float16, enabled=amp):
        logits = model(q[:, :-1], spk)
        loss = F.cross_entropy(logits, q[:, 1:])
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} norm {norm.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del logits, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16, enabled=amp):
    q, spk = batch(VB, VT)
    nll = F.cross_entropy(model(q[:, :-1], spk), q[:, 1:])
if device == "cuda":
    print(
        f"val nll {nll.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.autocast(device, dtype=torch.float16, enabled=amp):
    audio = model.generate(torch.arange(GB, device=device) % SPK, GT)
if device == "cuda":
    print(
        f"generated {tuple(audio.shape)} rms {audio.pow(2).mean().sqrt().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
