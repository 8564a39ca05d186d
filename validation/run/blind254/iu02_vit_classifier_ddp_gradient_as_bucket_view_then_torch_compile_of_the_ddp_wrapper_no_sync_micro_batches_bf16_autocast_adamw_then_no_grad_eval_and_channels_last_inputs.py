"""A ViT-style image classifier (patch 16 convolution at 224 x 224, 8 blocks, d 512, 8 heads through
SDPA, MLP 2048 with GELU, class token, 1000 classes) wrapped first in DDP with
`gradient_as_bucket_view=True` and `bucket_cap_mb=8` (the parameters span several buckets), then the
DDP wrapper itself compiled (`model = torch.compile(ddp_model)`): dynamo skips DDP's forward and
compiles the inner module under DDPOptimizer, which splits the graph at the bucket boundaries
(`optimize_ddp` at its default). Training with `ddp_model.no_sync()` gradient accumulation: 2
micro-batches of 48 images under no_sync, the third synchronised, bf16 autocast, label smoothing 0.1,
AdamW (foreach), `zero_grad()` (set to none); 3 steps. Then evaluation under `torch.no_grad()` (eval
mode: a recompile) of 2 batches of 128, then 2 more steps on channels_last inputs (a recompile for the
new strides). Process group: init_process_group('nccl') with rank 0 of 1 and MASTER_ADDR/PORT set by
the script. 4 phases."""

import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl")
torch.manual_seed(2542)

D, H, L, P, IMG, CLASSES = 512, 8, 8, 16, 224, 1000
MICRO, ACCUM = 48, 3


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, D)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, P, P)
        n = (IMG // P) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(1, n + 1, D) * 0.02)
        self.blocks = nn.Sequential(*[Block() for _ in range(L)])
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, img):
        x = self.patch(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


ddp_model = DDP(ViT().cuda(), device_ids=[0], gradient_as_bucket_view=True, bucket_cap_mb=8)
model = torch.compile(ddp_model)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05, foreach=True)
crit = nn.CrossEntropyLoss(label_smoothing=0.1)
imgs = torch.randn(ACCUM, MICRO, 3, IMG, IMG, device="cuda")
labels = torch.randint(0, CLASSES, (ACCUM, MICRO), device="cuda")
report("setup")


def train_steps(n, channels_last=False):
    for _ in range(n):
        for i in range(ACCUM):
            x = imgs[i].contiguous(memory_format=torch.channels_last) if channels_last else imgs[i]
            if i < ACCUM - 1:
                with ddp_model.no_sync():
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        loss = crit(model(x), labels[i]) / ACCUM
                    loss.backward()
            else:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = crit(model(x), labels[i]) / ACCUM
                loss.backward()
            del x, loss
        opt.step()
        opt.zero_grad()


train_steps(3)
report("train_no_sync_accum")

model.eval()
correct = 0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(2):
        x = torch.randn(128, 3, IMG, IMG, device="cuda")
        correct += int((model(x).argmax(-1) == 0).sum())
        del x
model.train()
print("eval correct", correct)
report("eval_no_grad")

train_steps(2, channels_last=True)
report("train_channels_last")
dist.destroy_process_group()
