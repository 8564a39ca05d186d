"""A Tacotron-1 style CBHG post-net mapping 80-bin mels to 513-bin linear spectrograms, conditioned on a
speaker embedding (256 speakers, 64 dims added after the projections), with an adversarial speaker
classifier on the CBHG output behind a gradient reversal layer (a custom torch.autograd.Function: identity
forward, -lambda * grad backward) so the features are pushed to be speaker-independent.

CBHG: a bank of K = 16 conv1d (kernel 1..16, 128 channels each, BatchNorm, ReLU) concatenated to 2048
channels, max-pool (stride 1), two conv1d projections, a residual, 4 highway layers and a bidirectional
GRU (128). `PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128` is set at the top.

fp32 foreach AdamW at batch 64, 400 frames, L1 on the linear spectrogram + the speaker cross-entropy.
Phases: 3 training steps; no_grad evaluation at batch 128; empty_cache(); 3 steps under fp16 autocast with
GradScaler. 3 phases."""

import os

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2234)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, T = (2, 24) if SMALL else (64, 400)
MEL, LIN, SPK = 80, 513, 256


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
              f"reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lam):
        ctx.lam = lam
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.lam * g, None


class Highway(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.h = nn.Linear(d, d)
        self.t = nn.Linear(d, d)
        nn.init.constant_(self.t.bias, -1.0)

    def forward(self, x):
        t = torch.sigmoid(self.t(x))
        return F.relu(self.h(x)) * t + x * (1 - t)


class CBHG(nn.Module):
    def __init__(self, cin, K=16, c=128, proj=(256, MEL)):
        super().__init__()
        self.bank = nn.ModuleList(nn.Sequential(nn.Conv1d(cin, c, k, padding=k // 2, bias=False), nn.BatchNorm1d(c)) for k in range(1, K + 1))
        self.p1 = nn.Sequential(nn.Conv1d(K * c, proj[0], 3, padding=1, bias=False), nn.BatchNorm1d(proj[0]))
        self.p2 = nn.Sequential(nn.Conv1d(proj[0], proj[1], 3, padding=1, bias=False), nn.BatchNorm1d(proj[1]))
        self.spk = nn.Embedding(SPK, 64)
        self.spk_proj = nn.Linear(64, proj[1])
        self.pre_hw = nn.Linear(proj[1], c)
        self.hw = nn.Sequential(*(Highway(c) for _ in range(4)))
        self.gru = nn.GRU(c, c, batch_first=True, bidirectional=True)

    def forward(self, x, spk):  # x [B, MEL, T]
        t = x.shape[2]
        y = torch.cat([F.relu(conv(x))[:, :, :t] for conv in self.bank], 1)
        y = F.max_pool1d(F.pad(y, (0, 1), mode="replicate"), 2, stride=1)
        y = F.relu(self.p1(y))
        y = self.p2(y) + x
        y = y.transpose(1, 2) + self.spk_proj(self.spk(spk))[:, None]
        y = self.hw(self.pre_hw(y))
        return self.gru(y)[0]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.cbhg = CBHG(MEL)
        self.out = nn.Linear(256, LIN)
        self.cls = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, SPK))

    def forward(self, mel, spk, lam=0.5):
        h = self.cbhg(mel, spk)
        lin = self.out(h)
        logits = self.cls(GradReverse.apply(h, lam).mean(1))
        return lin, logits


model = Model().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
print("params", sum(p.numel() for p in model.parameters()))


def batch(b):
    return (torch.randn(b, MEL, T, device=device), torch.randint(0, SPK, (b,), device=device),
            torch.randn(b, T, LIN, device=device).abs())


def step(scaler=None):
    mel, spk, lin_t = batch(B)
    with torch.autocast(device, dtype=torch.float16, enabled=scaler is not None):
        lin, logits = model(mel, spk)
        loss = F.l1_loss(lin.float(), lin_t) + 0.1 * F.cross_entropy(logits.float(), spk)
    opt.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return loss.item()


for i in range(3):
    print("step", i, step())
report("train_fp32")

model.eval()
with torch.no_grad():
    mel, spk, lin_t = batch(2 * B)
    lin, logits = model(mel, spk)
    print("eval l1", F.l1_loss(lin, lin_t).item(), "spk acc", (logits.argmax(1) == spk).float().mean().item())
    del lin, logits, mel, spk, lin_t
report("eval_no_grad")
torch.cuda.empty_cache() if device == "cuda" else None

model.train()
scaler = torch.amp.GradScaler(device)
for i in range(3):
    print("fp16 step", i, step(scaler))
report("train_fp16_gradscaler")
