"""GPT-2 small (Hugging Face's GPT2LMHeadModel from GPT2Config, 124 M parameters, tied input and
output embeddings) under DistributedDataParallel in one process, as it is debugged before a
multi-node launch: init_process_group('nccl', rank=0, world_size=1) with MASTER_ADDR/MASTER_PORT set
in the environment (a free port), DDP with bucket_cap_mb=8 and gradient_as_bucket_view=True, 4
micro-batches of 12 x 1024 tokens per step, the first 3 under no_sync(), bf16 autocast, fused AdamW
(weight decay on the matrices only), gradients clipped to 1.0; 3 steps; then an evaluation of 4
batches of 24 under no_grad; destroy_process_group at the end; 5 phases."""

import os
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14801)
B, T, EB = (2, 64, 2) if SMALL else (12, 1024, 24)
STEPS, ACCUM = 3, 4
device = "cuda" if torch.cuda.is_available() else "cpu"


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


os.environ["MASTER_ADDR"] = "localhost"
os.environ["MASTER_PORT"] = str(free_port())
dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
if device == "cuda":
    torch.cuda.set_device(0)

cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2) if SMALL else GPT2Config()
model = GPT2LMHeadModel(cfg).to(device)
model.config.use_cache = False
ddp = DDP(
    model,
    device_ids=[0] if device == "cuda" else None,
    bucket_cap_mb=8,
    gradient_as_bucket_view=True,
)
decay = [p for n, p in ddp.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in ddp.named_parameters() if p.dim() < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=6e-4,
    betas=(0.9, 0.95),
    fused=device == "cuda",
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

ddp.train()
for step in range(STEPS):
    for micro in range(ACCUM):
        ids = torch.randint(0, cfg.vocab_size, (B, T), device=device)
        last = micro == ACCUM - 1
        with torch.autocast(device, dtype=torch.bfloat16):
            if last:
                loss = ddp(input_ids=ids, labels=ids).loss / ACCUM
            else:
                with ddp.no_sync():
                    loss = ddp(input_ids=ids, labels=ids).loss / ACCUM
        if last:
            loss.backward()
        else:
            with ddp.no_sync():
                loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item() * ACCUM:.4f} gnorm {gnorm.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss, ids, gnorm
ddp.eval()
total = 0.0
with torch.no_grad():
    for _ in range(4):
        ids = torch.randint(0, cfg.vocab_size, (EB, T), device=device)
        with torch.autocast(device, dtype=torch.bfloat16):
            total += ddp(input_ids=ids, labels=ids).loss.item()
if device == "cuda":
    print(
        f"eval loss {total / 4:.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
dist.destroy_process_group()
