"""A tabular ResNet-MLP as rtdl (Gorishniy et al., "Revisiting Deep Learning Models for Tabular
Data", yandex-research/rtdl's ResNet: a linear stem, blocks of BatchNorm1d, Linear, ReLU, Dropout,
Linear, Dropout with the residual add, a BatchNorm1d + ReLU + Linear head) trained on random batches
whose sizes change from step to step, with the allocator's size rounding given per size class in the
bracket syntax before torch is imported:
PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:[256:1,512:2,1024:4,>:8]. 512 numeric features,
d_main 1,024, d_hidden 4,096, 8 blocks, 100 classes; fp32 weights with TF32 matmuls, AdamW (lr 1e-3,
weight decay 1e-5). Phases: a batch-size warmup (1,024, 2,048, 3,072, 4,096 rows, one step each);
six steps at sizes drawn from a seeded CPU generator between 2,000 and 8,192 rows;
torch.cuda.empty_cache() then an evaluation of 100,000 rows in chunks of 16,384 (the last one 1,696
rows) under inference_mode; three steps of gradient accumulation over micro-batches of 3,000, 3,000
and 2,000 rows under bf16 autocast; the epoch's last, short batch of 1,234 rows after
torch.cuda.empty_cache(); 5 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16503)
if SMALL:
    D_IN, D_MAIN, D_HIDDEN, N_BLOCKS, N_CLASSES = 16, 32, 64, 2, 5
    WARMUP, LOW, HIGH, EVAL_ROWS, EVAL_CHUNK, MICRO, LAST = (16, 32), 20, 64, 300, 128, (30, 30, 20), 13
else:
    D_IN, D_MAIN, D_HIDDEN, N_BLOCKS, N_CLASSES = 512, 1024, 4096, 8, 100
    WARMUP, LOW, HIGH = (1024, 2048, 3072, 4096), 2000, 8192
    EVAL_ROWS, EVAL_CHUNK, MICRO, LAST = 100000, 16384, (3000, 3000, 2000), 1234
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True
sizes_gen = torch.Generator().manual_seed(165030)


class Block(nn.Module):
    def __init__(self, d_main, d_hidden, dropout_first=0.25, dropout_second=0.0):
        super().__init__()
        self.normalization = nn.BatchNorm1d(d_main)
        self.linear_first = nn.Linear(d_main, d_hidden)
        self.dropout_first = nn.Dropout(dropout_first)
        self.linear_second = nn.Linear(d_hidden, d_main)
        self.dropout_second = nn.Dropout(dropout_second)

    def forward(self, x):
        z = self.normalization(x)
        z = self.linear_first(z)
        z = F.relu(z)
        z = self.dropout_first(z)
        z = self.linear_second(z)
        z = self.dropout_second(z)
        return x + z


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.first_layer = nn.Linear(D_IN, D_MAIN)
        self.blocks = nn.Sequential(*[Block(D_MAIN, D_HIDDEN) for _ in range(N_BLOCKS)])
        self.head = nn.Sequential(nn.BatchNorm1d(D_MAIN), nn.ReLU(), nn.Linear(D_MAIN, N_CLASSES))

    def forward(self, x):
        return self.head(self.blocks(self.first_layer(x)))


model = ResNet().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-5)


def batch_of(rows):
    x = torch.randn(rows, D_IN, device=device)
    y = torch.randint(0, N_CLASSES, (rows,), device=device)
    return x, y


def step(rows):
    x, y = batch_of(rows)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def report(name):
    if device == "cuda":
        print(
            f"{name}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model.train()
for rows in WARMUP:
    loss = step(rows)
print(f"warmup loss {loss:.4f}")
report("batch warmup")

sizes = torch.randint(LOW, HIGH + 1, (6,), generator=sizes_gen).tolist()
for rows in sizes:
    loss = step(rows)
print(f"variable sizes {sizes} loss {loss:.4f}")
report("variable batches")

if device == "cuda":
    torch.cuda.empty_cache()
model.eval()
correct = 0
with torch.inference_mode():
    for start in range(0, EVAL_ROWS, EVAL_CHUNK):
        x, y = batch_of(min(EVAL_CHUNK, EVAL_ROWS - start))
        correct += (model(x).argmax(1) == y).sum().item()
print(f"eval accuracy {correct / EVAL_ROWS:.4f}")
report("eval")

model.train()
for _ in range(3):
    optimizer.zero_grad(set_to_none=True)
    total = sum(MICRO)
    for rows in MICRO:
        x, y = batch_of(rows)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y) * rows / total
        loss.backward()
    optimizer.step()
print(f"accumulated loss {loss.item():.4f}")
report("accumulation bf16")

if device == "cuda":
    torch.cuda.empty_cache()
print(f"last batch loss {step(LAST):.4f}")
report("last batch")
