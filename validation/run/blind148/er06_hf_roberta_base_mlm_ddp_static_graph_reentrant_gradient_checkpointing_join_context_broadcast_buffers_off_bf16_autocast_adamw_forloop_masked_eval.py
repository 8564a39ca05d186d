"""RoBERTa-base masked-language-model pre-training (Hugging Face's RobertaForMaskedLM from
RobertaConfig, 125 M parameters) under DDP in one process, as it is tried on one GPU first:
init_process_group('nccl', rank=0, world_size=1) with MASTER_ADDR/MASTER_PORT in the environment (a
free port), HF gradient checkpointing with the reentrant torch.utils.checkpoint (which DDP accepts
only with static_graph=True), broadcast_buffers=False, the training loop inside DDP's join()
context for uneven inputs, bf16 autocast (no GradScaler), 15% of tokens masked 80/10/10, AdamW
without foreach (the for-loop implementation), linear warm-up; batch 32 x 512, 4 steps; then the
masked-token accuracy of 2 batches of 64 under no_grad; 6 phases."""

import os
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import RobertaConfig, RobertaForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14806)
B, T, EB, STEPS = (2, 32, 2, 4) if SMALL else (32, 512, 64, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"

sock = socket.socket()
sock.bind(("localhost", 0))
os.environ["MASTER_ADDR"] = "localhost"
os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
sock.close()
dist.init_process_group(backend="nccl" if device == "cuda" else "gloo", world_size=1, rank=0)
torch.cuda.set_device(0) if device == "cuda" else None

if SMALL:
    cfg = RobertaConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=T + 2)
else:
    cfg = RobertaConfig(vocab_size=50265, max_position_embeddings=514)
model = RobertaForMaskedLM(cfg).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
ddp = DDP(model, device_ids=[0] if device == "cuda" else None, static_graph=True, broadcast_buffers=False)
opt = torch.optim.AdamW(ddp.parameters(), lr=6e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01, foreach=False)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
MASK, PAD = 4, 1
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def masked(n):
    ids = torch.randint(5, cfg.vocab_size, (n, T), device=device)
    labels = ids.clone()
    sel = torch.rand(n, T, device=device) < 0.15
    labels[~sel] = -100
    r = torch.rand(n, T, device=device)
    ids = torch.where(sel & (r < 0.8), torch.full_like(ids, MASK), ids)
    rnd = torch.randint(5, cfg.vocab_size, (n, T), device=device)
    ids = torch.where(sel & (r >= 0.8) & (r < 0.9), rnd, ids)
    return ids, labels


ddp.train()
with ddp.join():
    for step in range(STEPS):
        ids, labels = masked(B)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = ddp(input_ids=ids, attention_mask=(ids != PAD).long(), labels=labels).loss
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
            torch.cuda.reset_peak_memory_stats()

del loss, ids, labels
ddp.eval()
hits = total = 0
with torch.no_grad():
    for _ in range(2):
        ids, labels = masked(EB)
        with torch.autocast(device, dtype=torch.bfloat16):
            logits = ddp(input_ids=ids, attention_mask=(ids != PAD).long()).logits
        sel = labels != -100
        hits += (logits.argmax(-1)[sel] == labels[sel]).sum().item()
        total += sel.sum().item()
        del logits
if device == "cuda":
    print(f"eval acc {hits / max(total, 1):.4f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
dist.destroy_process_group()
