"""SCARF: self-supervised contrastive learning with random feature corruption for tabular data, by hand.

Data: 96 numeric and 12 categorical features (per-column nn.Embedding of 8, cardinalities 5..60); an
unlabelled pool of 262,144 rows and a labelled set of 65,536 rows with 7 classes, all on the device.
Corruption: 60% of each row's features (torch.rand < 0.6) replaced by the same column's value in a
random pool row (marginal sampling: randint row ids per (row, column), gather, torch.where), numeric and
categorical alike. Encoder: 4 x (Linear 2048, BatchNorm1d, ReLU) over the 192 inputs; pretraining head
Linear 2048 -> ReLU -> Linear 256; NT-Xent (temperature 1.0) between each row's anchor and corrupted
view, both directions, as a (2B x 2B) similarity matrix with the diagonal masked.

Phases: pretraining under fp16 autocast with torch.amp.GradScaler and fused AdamW at batch 8,192 (the
first step, then 3 more); a linear probe: the encoder's features of the labelled set under no_grad in
chunks of 16,384, then 20 SGD steps of a Linear on them; fine-tuning of the encoder and a new head
under bf16 autocast with checkpoint_sequential over the encoder (4 segments, use_reentrant=False) and
foreach AdamW with a lower learning rate on the encoder, batch 32,768, 3 steps; inference_mode
evaluation. 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint_sequential

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2135)
if SMALL:
    N_POOL, N_LAB, BATCH, WIDTH, CHUNK = 4096, 2048, 256, 64, 512
else:
    N_POOL, N_LAB, BATCH, WIDTH, CHUNK = 262_144, 65_536, 8192, 2048, 16_384
N_NUM, EMB, CLASSES = 96, 8, 7
CARDS = [5 + 5 * i for i in range(12)]
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def make_rows(n):
    x_num = torch.randn(n, N_NUM, device=device)
    x_cat = torch.stack([torch.randint(0, c, (n,), device=device) for c in CARDS], dim=1)
    return x_num, x_cat


pool_num, pool_cat = make_rows(N_POOL)
lab_num, lab_cat = make_rows(N_LAB)
w_true = torch.randn(N_NUM, CLASSES, device=device)
lab_y = (lab_num @ w_true + F.one_hot(lab_cat[:, 0] % CLASSES, CLASSES) * 2).argmax(1)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embs = nn.ModuleList([nn.Embedding(c, EMB) for c in CARDS])
        layers = []
        d = N_NUM + EMB * len(CARDS)
        for _ in range(4):
            layers += [nn.Linear(d, WIDTH), nn.BatchNorm1d(WIDTH), nn.ReLU()]
            d = WIDTH
        self.mlp = nn.Sequential(*layers)
        self.checkpoint = False

    def forward(self, x_num, x_cat):
        x = torch.cat([x_num] + [e(x_cat[:, i]) for i, e in enumerate(self.embs)], dim=1)
        if self.checkpoint and self.training:
            return checkpoint_sequential(self.mlp, 4, x, use_reentrant=False)
        return self.mlp(x)


def corrupt(x_num, x_cat, rate=0.6):
    b = len(x_num)
    mask = torch.rand(b, N_NUM + len(CARDS), device=device) < rate
    rows = torch.randint(0, N_POOL, (b, N_NUM + len(CARDS)), device=device)
    rand_num = pool_num.gather(0, rows[:, :N_NUM])
    rand_cat = pool_cat.gather(0, rows[:, N_NUM:])
    return torch.where(mask[:, :N_NUM], rand_num, x_num), torch.where(mask[:, N_NUM:], rand_cat, x_cat)


def nt_xent(z1, z2, tau=1.0):
    z = F.normalize(torch.cat([z1, z2]).float(), dim=1)
    sim = z @ z.T / tau
    sim.fill_diagonal_(float("-inf"))
    n = len(z1)
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(device)
    return F.cross_entropy(sim, target)


encoder = Encoder().to(device)
head = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 256)).to(device)
print(f"encoder params {sum(p.numel() for p in encoder.parameters()) / 1e6:.2f}M")
opt = torch.optim.AdamW([*encoder.parameters(), *head.parameters()], lr=1e-3, weight_decay=1e-5, fused=amp)
scaler = torch.amp.GradScaler("cuda", enabled=amp)


def pretrain_step():
    idx = torch.randint(0, N_POOL, (BATCH,), device=device)
    x_num, x_cat = pool_num[idx], pool_cat[idx]
    c_num, c_cat = corrupt(x_num, x_cat)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        z1 = head(encoder(x_num, x_cat))
        z2 = head(encoder(c_num, c_cat))
        loss = nt_xent(z1, z2)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    return loss.item()


encoder.train()
head.train()
print(f"pretrain step 0 loss {pretrain_step():.4f}")
report("first pretraining step")
for _ in range(3):
    loss = pretrain_step()
print(f"pretrain step 3 loss {loss:.4f} scale {scaler.get_scale()}")
report("pretraining")

encoder.eval()
with torch.no_grad():
    feats = torch.cat(
        [encoder(lab_num[i : i + CHUNK], lab_cat[i : i + CHUNK]) for i in range(0, N_LAB, CHUNK)]
    )
probe = nn.Linear(WIDTH, CLASSES).to(device)
probe_opt = torch.optim.SGD(probe.parameters(), lr=0.1, momentum=0.9)
for step in range(20):
    idx = torch.randint(0, N_LAB, (BATCH,), device=device)
    loss = F.cross_entropy(probe(feats[idx]), lab_y[idx])
    loss.backward()
    probe_opt.step()
    probe_opt.zero_grad(set_to_none=True)
with torch.no_grad():
    acc = (probe(feats).argmax(1) == lab_y).float().mean()
print(f"linear probe loss {loss.item():.4f} accuracy {acc.item():.4f}")
del feats, probe, probe_opt
report("linear probe")

del opt, scaler, head
encoder.train()
encoder.checkpoint = True
classifier = nn.Linear(WIDTH, CLASSES).to(device)
opt = torch.optim.AdamW(
    [{"params": encoder.parameters(), "lr": 1e-4}, {"params": classifier.parameters(), "lr": 1e-3}],
    weight_decay=1e-4,
    foreach=True,
)
for step in range(3):
    idx = torch.randint(0, N_LAB, (4 * BATCH,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = F.cross_entropy(classifier(encoder(lab_num[idx], lab_cat[idx])).float(), lab_y[idx])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"finetune step {step} loss {loss.item():.4f}")
report("finetune")

encoder.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    correct = sum(
        (
            classifier(encoder(lab_num[i : i + CHUNK], lab_cat[i : i + CHUNK])).argmax(1)
            == lab_y[i : i + CHUNK]
        ).sum()
        for i in range(0, N_LAB, CHUNK)
    )
print(f"finetuned accuracy {correct.item() / N_LAB:.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
