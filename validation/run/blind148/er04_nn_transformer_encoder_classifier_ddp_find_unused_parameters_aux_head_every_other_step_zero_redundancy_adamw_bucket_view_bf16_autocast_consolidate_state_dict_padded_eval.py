"""A text classifier on nn.TransformerEncoder (12 pre-norm layers, d 1024, 16 heads, ffn 4096, GELU,
batch_first; vocab 32000, learned positions to 512) with an auxiliary masked-token head used only on
even steps, under DDP with find_unused_parameters=True, one process: init_process_group('nccl',
rank=0, world_size=1) with MASTER_ADDR/MASTER_PORT in the environment (a free port);
ZeroRedundancyOptimizer over AdamW (parameters_as_bucket_view=True, weight decay 0.01), bf16
autocast, batch 32 x 512 with a padding mask, gradients clipped to 1.0; 4 steps; then the
optimizer's state consolidated on rank 0 (consolidate_state_dict) and saved to a buffer; then an
evaluation of 2 padded batches of 64 under inference_mode (the encoder's fast path with a key padding
mask); 7 phases."""

import io
import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14804)
D, NL, NH, FF, V, NC = (64, 2, 4, 128, 500, 5) if SMALL else (1024, 12, 16, 4096, 32000, 20)
B, T, EB = (4, 32, 4) if SMALL else (32, 512, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"

with socket.socket() as s:
    s.bind(("", 0))
    port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=str(port))
dist.init_process_group(backend="nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
if device == "cuda":
    torch.cuda.set_device(0)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D, padding_idx=0)
        self.pos = nn.Embedding(T, D)
        layer = nn.TransformerEncoderLayer(D, NH, FF, dropout=0.1, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, NL, norm=nn.LayerNorm(D), enable_nested_tensor=False)
        self.cls = nn.Sequential(nn.Linear(D, D), nn.Tanh(), nn.Linear(D, NC))
        self.mlm = nn.Linear(D, V)

    def forward(self, ids, pad, with_mlm):
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.encoder(self.tok(ids) + self.pos(pos), src_key_padding_mask=pad)
        logits = self.cls(h[:, 0])
        return logits, (self.mlm(h) if with_mlm else None)


model = Classifier().to(device)
model = DDP(model, device_ids=[0] if device == "cuda" else None, find_unused_parameters=True)
opt = ZeroRedundancyOptimizer(
    model.parameters(),
    optimizer_class=torch.optim.AdamW,
    parameters_as_bucket_view=True,
    lr=1e-4,
    weight_decay=0.01,
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    lengths = torch.randint(T // 4, T + 1, (n,), device=device)
    pad = torch.arange(T, device=device)[None, :] >= lengths[:, None]
    ids = torch.randint(1, V, (n, T), device=device).masked_fill(pad, 0)
    return ids, pad


model.train()
for step in range(4):
    ids, pad = batch(B)
    y = torch.randint(0, NC, (B,), device=device)
    with_mlm = step % 2 == 0
    with torch.autocast(device, dtype=torch.bfloat16):
        logits, mlm = model(ids, pad, with_mlm)
        loss = F.cross_entropy(logits, y)
        if with_mlm:
            loss = loss + 0.1 * F.cross_entropy(mlm.flatten(0, 1), ids.flatten(), ignore_index=0)
    loss.backward()
    gnorm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} mlm {with_mlm} loss {loss.item():.4f} gnorm {gnorm.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss, logits, mlm, gnorm
opt.consolidate_state_dict(to=0)
buf = io.BytesIO()
torch.save({"model": model.module.state_dict(), "optim": opt.state_dict()}, buf)
if device == "cuda":
    print(f"checkpoint {buf.tell()} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.inference_mode():
    for _ in range(2):
        ids, pad = batch(EB)
        y = torch.randint(0, NC, (EB,), device=device)
        with torch.autocast(device, dtype=torch.bfloat16):
            logits, _ = model(ids, pad, False)
        correct += (logits.argmax(-1) == y).sum().item()
if device == "cuda":
    print(f"eval correct {correct} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
dist.destroy_process_group()
