"""ECAPA-TDNN speaker embedding written from the paper: a conv1d+BN stem over 80-band filterbanks,
three SE-Res2Net blocks (1x1 conv, Res2Net scale-8 dilated conv1d chain, 1x1 conv, squeeze and
excitation) with multi-layer feature aggregation, attentive statistics pooling (channel-dependent
attention with global context of mean and std), a 192-d embedding with BN, and an additive angular
margin (AAM) softmax over 5,994 speakers (normalised weight, cos(theta+m) with easy margin off,
scale 30); bf16 autocast, AdamW with a OneCycle schedule, 3 training steps on crops of different
lengths, then embedding extraction of long utterances under no_grad and a cosine score matrix;
5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12104)
B = 8 if SMALL else 128
CROPS = [100, 150, 120] if SMALL else [200, 300, 250]
C, N_MEL, EMB, SPK, SCALE = (128 if SMALL else 1024), 80, 192, 5994, 8
device = "cuda" if torch.cuda.is_available() else "cpu"


class SE(nn.Module):
    def __init__(self, c, bottleneck=128):
        super().__init__()
        self.fc1 = nn.Conv1d(c, bottleneck, 1)
        self.fc2 = nn.Conv1d(bottleneck, c, 1)

    def forward(self, x):
        s = x.mean(dim=2, keepdim=True)
        return x * torch.sigmoid(self.fc2(F.relu(self.fc1(s))))


class Res2Block(nn.Module):
    def __init__(self, c, k, d):
        super().__init__()
        w = c // SCALE
        self.conv1 = nn.Conv1d(c, c, 1)
        self.bn1 = nn.BatchNorm1d(c)
        self.convs = nn.ModuleList(
            nn.Conv1d(w, w, k, dilation=d, padding=d * (k // 2)) for _ in range(SCALE - 1)
        )
        self.bns = nn.ModuleList(nn.BatchNorm1d(w) for _ in range(SCALE - 1))
        self.conv3 = nn.Conv1d(c, c, 1)
        self.bn3 = nn.BatchNorm1d(c)
        self.se = SE(c)

    def forward(self, x):
        res = x
        x = self.bn1(F.relu(self.conv1(x)))
        parts = torch.chunk(x, SCALE, dim=1)
        outs = []
        sp = None
        for i in range(SCALE - 1):
            sp = parts[i] if i == 0 else sp + parts[i]
            sp = self.bns[i](F.relu(self.convs[i](sp)))
            outs.append(sp)
        outs.append(parts[-1])
        x = self.bn3(F.relu(self.conv3(torch.cat(outs, 1))))
        return self.se(x) + res


class AttentiveStatsPool(nn.Module):
    def __init__(self, c, att=128):
        super().__init__()
        self.tdnn = nn.Conv1d(3 * c, att, 1)
        self.bn = nn.BatchNorm1d(att)
        self.conv = nn.Conv1d(att, c, 1)

    def forward(self, x):
        t = x.shape[-1]
        mean = x.mean(2, keepdim=True).expand(-1, -1, t)
        std = torch.sqrt(x.var(2, keepdim=True).clamp(min=1e-5)).expand(-1, -1, t)
        a = self.conv(torch.tanh(self.bn(F.relu(self.tdnn(torch.cat([x, mean, std], 1))))))
        w = F.softmax(a, dim=2)
        mu = (x * w).sum(2)
        sg = torch.sqrt(((x**2) * w).sum(2) - mu**2).clamp(min=1e-5)
        return torch.cat([mu, sg], 1)


class ECAPA(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv1d(N_MEL, C, 5, padding=2), nn.ReLU(), nn.BatchNorm1d(C))
        self.blocks = nn.ModuleList([Res2Block(C, 3, 2), Res2Block(C, 3, 3), Res2Block(C, 3, 4)])
        self.mfa = nn.Conv1d(3 * C, 1536 if not SMALL else 3 * C, 1)
        c_mfa = self.mfa.out_channels
        self.pool = AttentiveStatsPool(c_mfa)
        self.bn_pool = nn.BatchNorm1d(2 * c_mfa)
        self.fc = nn.Linear(2 * c_mfa, EMB)
        self.bn_emb = nn.BatchNorm1d(EMB)

    def forward(self, feats):
        x = self.stem(feats - feats.mean(2, keepdim=True))
        outs = []
        for blk in self.blocks:
            x = blk(x)
            outs.append(x)
        x = F.relu(self.mfa(torch.cat(outs, 1)))
        return self.bn_emb(self.fc(self.bn_pool(self.pool(x))))


class AAMSoftmax(nn.Module):
    def __init__(self, m=0.2, s=30.0):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(SPK, EMB))
        nn.init.xavier_normal_(self.weight)
        self.m, self.s = m, s
        self.th, self.mm = math.cos(math.pi - m), math.sin(math.pi - m) * m

    def forward(self, emb, label):
        cosine = F.linear(F.normalize(emb), F.normalize(self.weight))
        sine = torch.sqrt((1.0 - cosine * cosine).clamp(0, 1))
        phi = cosine * math.cos(self.m) - sine * math.sin(self.m)
        phi = torch.where(cosine - self.th > 0, phi, cosine - self.mm)
        one_hot = torch.zeros_like(cosine).scatter_(1, label.view(-1, 1), 1)
        logits = self.s * (one_hot * phi + (1.0 - one_hot) * cosine)
        return F.cross_entropy(logits, label)


model = ECAPA().to(device)
head = AAMSoftmax().to(device)
params = list(model.parameters()) + list(head.parameters())
opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=2e-5)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=len(CROPS))

if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step, frames in enumerate(CROPS):
    feats = torch.randn(B, N_MEL, frames, device=device)
    label = torch.randint(0, SPK, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = head(model(feats), label)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} T {frames} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del feats, loss
model.eval()
embs = []
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    for i in range(4):
        feats = torch.randn(B // 4, N_MEL, 400 if SMALL else 1500 + 250 * i, device=device)
        embs.append(F.normalize(model(feats).float()))
    embs = torch.cat(embs)
    scores = embs @ embs.t()
if device == "cuda":
    print(
        f"embed scores {tuple(scores.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
