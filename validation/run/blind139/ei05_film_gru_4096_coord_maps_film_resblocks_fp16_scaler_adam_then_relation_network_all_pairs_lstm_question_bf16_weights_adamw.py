"""Visual reasoning on CLEVR-sized inputs, two classic models written by hand. FiLM (Perez et al.
2018), raw-pixel variant: a stem of four 4 x 4 stride-2 convolutions (128 kernels, BN, ReLU) from
224 x 224 to 14 x 14, a question GRU of 4,096 units over 200-wide word embeddings (padded
questions 8 to 45 tokens, pack_padded_sequence with enforce_sorted=False, the last hidden state),
a linear FiLM generator for 4 residual blocks (coordinate maps concatenated, 1 x 1 conv, ReLU,
3 x 3 conv, BatchNorm2d(affine=False), gamma * x + beta, ReLU, residual), a classifier of 1 x 1
conv to 512, global max-pool and a 1,024-wide MLP over 28 answers; fp16 autocast with GradScaler
(init scale 2 ** 10), Adam (weight decay 1e-5), batch 64; 2 steps and the accuracy of 256 questions
under no_grad. Then a Relation Network (Santoro et al. 2017): four 3 x 3 stride-2 conv layers of 24
kernels on 128 x 128 images give 64 objects (+ 2 coordinates), an LSTM of 128 over the question,
all 4,096 ordered pairs concatenated with the question (batch 64 x 4,096 x 180), g of four
256-wide Linear + ReLU, summed over pairs, f of 256 -> 256 -> dropout -> 28; the model held in bf16
(`.to(torch.bfloat16)`), AdamW; 2 steps; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13905)
B, EB, IMG, GRU_H, RN_IMG = (2, 4, 64, 64, 32) if SMALL else (64, 256, 224, 4096, 128)
VOCAB, EMB, ANSWERS, BLOCKS, C = 90, 200, 28, 4, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def coord_map(b, h, w, dev, dtype=torch.float32):
    ys = torch.linspace(-1, 1, h, device=dev, dtype=dtype).view(1, 1, h, 1).expand(b, 1, h, w)
    xs = torch.linspace(-1, 1, w, device=dev, dtype=dtype).view(1, 1, 1, w).expand(b, 1, h, w)
    return torch.cat([xs, ys], dim=1)


def questions(b):
    lengths = torch.randint(8, 46, (b,))
    q = torch.randint(1, VOCAB, (b, 45), device=device)
    mask = torch.arange(45).unsqueeze(0) < lengths.unsqueeze(1)
    return q * mask.to(device), lengths


class FiLMedBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c + 2, c, 1)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c, affine=False)

    def forward(self, x, gamma, beta):
        h = F.relu(
            self.conv1(torch.cat([x, coord_map(x.shape[0], x.shape[2], x.shape[3], x.device, x.dtype)], 1))
        )
        out = self.bn(self.conv2(h))
        out = F.relu(gamma.unsqueeze(-1).unsqueeze(-1) * out + beta.unsqueeze(-1).unsqueeze(-1))
        return h + out


class FiLMNet(nn.Module):
    def __init__(self):
        super().__init__()
        stem = []
        cin = 3
        for _ in range(4):
            stem += [nn.Conv2d(cin, C, 4, 2, 1), nn.BatchNorm2d(C), nn.ReLU(inplace=True)]
            cin = C
        self.stem = nn.Sequential(*stem)
        self.embed = nn.Embedding(VOCAB, EMB, padding_idx=0)
        self.gru = nn.GRU(EMB, GRU_H, batch_first=True)
        self.film = nn.Linear(GRU_H, BLOCKS * 2 * C)
        self.blocks = nn.ModuleList(FiLMedBlock(C) for _ in range(BLOCKS))
        self.cls_conv = nn.Sequential(nn.Conv2d(C + 2, 512, 1), nn.BatchNorm2d(512), nn.ReLU(inplace=True))
        self.cls = nn.Sequential(
            nn.Linear(512, 1024), nn.BatchNorm1d(1024), nn.ReLU(inplace=True), nn.Linear(1024, ANSWERS)
        )

    def forward(self, img, q, lengths):
        packed = pack_padded_sequence(self.embed(q), lengths, batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(packed)
        film = self.film(h_n[-1]).view(q.shape[0], BLOCKS, 2, C)
        x = self.stem(img)
        for i, block in enumerate(self.blocks):
            x = block(x, 1 + film[:, i, 0], film[:, i, 1])
        x = self.cls_conv(torch.cat([x, coord_map(x.shape[0], x.shape[2], x.shape[3], x.device, x.dtype)], 1))
        return self.cls(F.adaptive_max_pool2d(x, 1).flatten(1))


class RelationNet(nn.Module):
    def __init__(self):
        super().__init__()
        layers = []
        cin = 3
        for _ in range(4):
            layers += [nn.Conv2d(cin, 24, 3, 2, 1), nn.ReLU(inplace=True), nn.BatchNorm2d(24)]
            cin = 24
        self.conv = nn.Sequential(*layers)
        self.embed = nn.Embedding(VOCAB, 32, padding_idx=0)
        self.lstm = nn.LSTM(32, 128, batch_first=True)
        d = 2 * 26 + 128
        self.g = nn.Sequential(
            nn.Linear(d, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
            nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
        )  # fmt: skip
        self.f = nn.Sequential(
            nn.Linear(256, 256),
            nn.ReLU(),
            nn.Linear(256, 256),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(256, ANSWERS),
        )

    def forward(self, img, q, lengths):
        x = self.conv(img)
        b, c, h, w = x.shape
        x = torch.cat([x, coord_map(b, h, w, x.device, x.dtype)], 1).flatten(2).transpose(1, 2)
        n = h * w
        out, _ = self.lstm(self.embed(q))
        qst = out[torch.arange(b, device=q.device), (lengths - 1).to(q.device)]
        x_i = x.unsqueeze(1).expand(b, n, n, c + 2)
        x_j = x.unsqueeze(2).expand(b, n, n, c + 2)
        qst = qst.view(b, 1, 1, -1).expand(b, n, n, qst.shape[-1])
        pairs = torch.cat([x_i, x_j, qst], dim=3).view(b * n * n, -1)
        g = self.g(pairs).view(b, n * n, 256).sum(1)
        return self.f(g)


film_net = FiLMNet().to(device)
optimizer = torch.optim.Adam(film_net.parameters(), lr=3e-4, weight_decay=1e-5)
scaler = torch.amp.GradScaler(device, init_scale=2.0**10, enabled=amp)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

film_net.train()
for step in range(2):
    img = torch.randn(B, 3, IMG, IMG, device=device)
    q, lengths = questions(B)
    answer = torch.randint(0, ANSWERS, (B,), device=device)
    with torch.autocast(device, dtype=torch.float16, enabled=amp):
        loss = F.cross_entropy(film_net(img, q, lengths), answer)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    if device == "cuda":
        print(
            f"film step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss
film_net.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16, enabled=amp):
    img = torch.randn(EB, 3, IMG, IMG, device=device)
    q, lengths = questions(EB)
    answer = torch.randint(0, ANSWERS, (EB,), device=device)
    acc = (film_net(img, q, lengths).argmax(1) == answer).float().mean()
if device == "cuda":
    print(
        f"film acc {acc.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del film_net, optimizer, scaler
rn = RelationNet().to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(rn.parameters(), lr=2.5e-4)
rn.train()
for step in range(2):
    img = torch.randn(B, 3, RN_IMG, RN_IMG, device=device, dtype=torch.bfloat16)
    q, lengths = questions(B)
    answer = torch.randint(0, ANSWERS, (B,), device=device)
    loss = F.cross_entropy(rn(img, q, lengths).float(), answer)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"rn step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        if step == 0:
            torch.cuda.reset_peak_memory_stats()
