"""An image classifier whose batches are prepared on the GPU by a side stream that allocates into its own
memory pool, so the augmentation's buffers never mix with the training's cache: `torch.cuda.MemPool()` plus
`torch.cuda.use_mem_pool(pool)` inside `torch.cuda.stream(aug)`, under an allocator configured before torch is
imported (`PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128"`).

Data: 6 host batches of 96 uint8 images (3 x 160 x 160) in pinned memory, each copied with `non_blocking=True`
on the augmentation stream, then random 128 x 128 crops (one offset per batch), horizontal flips of half the
batch (`torch.where`), conversion to float, per-channel normalisation and mixup with the batch reversed; the
batch is handed to the main stream (`wait_stream`, `record_stream`) and the next one is prepared while the
current one trains. After each step the script calls `torch.cuda.synchronize()` (for its step timer), so the
streams' events are complete before the next allocation.

The model: an MLP-Mixer by hand (16 x 16 patches -> 64 tokens, 512 wide, 8 blocks of token-mixing MLP 256 and
channel-mixing MLP 2,048, LayerNorm, GELU), 100 classes, soft-target cross-entropy, bf16 autocast, AdamW.

Phases: set-up (model, optimizer, pinned host batches, pool, the first batch prepared); 12 training steps with
the next batch prepared on the side stream in the pool; an evaluation of 4 batches prepared the same way under
`no_grad`; the pool deleted, `empty_cache()`, and 6 steps with the augmentation run on the main stream in the
default pool. 4 phases. Seeded; no value-dependent sizes."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:128"

import time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3174)
dev = torch.device("cuda")
NB, B, S, C, NCLS = 6, 96, 160, 128, 100
PATCH, D, TOK_H, CH_H, L = 16, 512, 256, 2048, 8
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class MixerBlock(nn.Module):
    def __init__(self, n_tok):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.tok = nn.Sequential(nn.Linear(n_tok, TOK_H), nn.GELU(), nn.Linear(TOK_H, n_tok))
        self.ln2 = nn.LayerNorm(D)
        self.ch = nn.Sequential(nn.Linear(D, CH_H), nn.GELU(), nn.Linear(CH_H, D))

    def forward(self, x):
        x = x + self.tok(self.ln1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.ln2(x))


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        n_tok = (C // PATCH) ** 2
        self.stem = nn.Linear(3 * PATCH * PATCH, D)
        self.blocks = nn.Sequential(*[MixerBlock(n_tok) for _ in range(L)])
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, NCLS)

    def forward(self, img):
        b = img.shape[0]
        p = img.unfold(2, PATCH, PATCH).unfold(3, PATCH, PATCH)
        p = p.permute(0, 2, 3, 1, 4, 5).reshape(b, -1, 3 * PATCH * PATCH)
        return self.head(self.ln(self.blocks(self.stem(p))).mean(1))


model = Mixer().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
host = [torch.randint(0, 256, (B, 3, S, S), dtype=torch.uint8).pin_memory() for _ in range(NB)]
labels = [torch.randint(0, NCLS, (B,)).pin_memory() for _ in range(NB)]
mean, std = MEAN.to(dev), STD.to(dev)
offsets = torch.randint(0, S - C + 1, (64, 2)).tolist()
flips = [torch.rand(B) < 0.5 for _ in range(64)]
aug = torch.cuda.Stream()
pool = torch.cuda.MemPool()


def augment(i):
    raw = host[i % NB].to(dev, non_blocking=True)
    y = F.one_hot(labels[i % NB].to(dev, non_blocking=True), NCLS).float()
    oy, ox = offsets[i]
    crop = raw[:, :, oy : oy + C, ox : ox + C]
    flip = flips[i].to(dev, non_blocking=True).view(B, 1, 1, 1)
    img = torch.where(flip, crop.flip(-1), crop).float()
    img = (img - mean) / std
    lam = 0.8
    return lam * img + (1 - lam) * img.flip(0), lam * y + (1 - lam) * y.flip(0)


def prepare(i):
    aug.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(aug), torch.cuda.use_mem_pool(pool):
        x, y = augment(i)
    return x, y


def handoff(x, y):
    main = torch.cuda.current_stream()
    main.wait_stream(aug)
    x.record_stream(main)
    y.record_stream(main)
    return x, y


def train_on(x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
    loss = torch.sum(-y * F.log_softmax(logits.float(), dim=-1), dim=-1).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


nxt = prepare(0)
report("set-up and first batch")

for step in range(12):
    t0 = time.perf_counter()
    x, y = handoff(*nxt)
    nxt = prepare(step + 1)
    loss = train_on(x, y)
    del x, y
    torch.cuda.synchronize()
    print(f"step {step} loss {loss.item():.4f} {1000 * (time.perf_counter() - t0):.1f} ms")
report("12 steps, batches prepared on the side stream in the pool")

model.eval()
correct = 0
with torch.no_grad():
    for k in range(4):
        x, y = handoff(*nxt)
        nxt = prepare(20 + k)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            correct += int((model(x).argmax(-1) == y.argmax(-1)).sum())
        del x, y
        torch.cuda.synchronize()
print(f"eval correct {correct}")
model.train()
report("evaluation on pool-prepared batches")

del nxt, pool
torch.cuda.empty_cache()
for step in range(6):
    x, y = augment(30 + step)
    loss = train_on(x, y)
    del x, y
    torch.cuda.synchronize()
    print(f"main-stream step {step} loss {loss.item():.4f}")
report("pool deleted, augmentation on the main stream")
