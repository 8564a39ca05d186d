"""PyTorch's DDP tutorial layout with one rank: the script sets MASTER_ADDR and MASTER_PORT (a free port
its spawned rank inherits), and under
`if __name__ == "__main__":` starts its ranks with torch.multiprocessing.spawn(worker, nprocs=1) (the
machine has one GPU); the spawned rank calls init_process_group("nccl", rank, world_size=1) itself,
sets its device and does all the CUDA work (the parent touches no CUDA). Model: transformers'
GPT2LMHeadModel from a GPT2Config (6 layers, d 768, 12 heads, n_positions 512, no download, fp32
weights), wrapped in DistributedDataParallel(device_ids=[rank], gradient_as_bucket_view=True). Token ids
are drawn on the CPU from a fixed generator; sizes never follow data values.

Phases (all in the spawned rank): 4 training steps at batch 8 x 512 under bf16 autocast with fused AdamW
and clip_grad_norm_; the rank's metrics gathered with dist.all_gather_object and a config dict sent with
dist.broadcast_object_list, then 2 more steps at batch 12 x 512 under no_sync() gradient accumulation
(2 micro-batches, the second outside no_sync); an inference_mode evaluation of model.module at batch
16 x 512 in bf16 autocast (logits, loss); then destroy_process_group. 3 phases."""

import os
import socket


def free_port():
    """A port no other process holds: the GPU call runs several copies of a script at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", free_port())  # inherited by the spawned rank

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import GPT2Config, GPT2LMHeadModel

SEQ, VOCAB = 512, 50257


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(g, b):
    ids = torch.randint(0, VOCAB, (b, SEQ), generator=g)
    return ids.cuda(), ids.clone().cuda()


def worker(rank, world_size, n_layer):
    torch.manual_seed(2322 + rank)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    device = torch.device("cuda", rank)
    cfg = GPT2Config(n_layer=n_layer, n_embd=768, n_head=12, n_positions=SEQ, vocab_size=VOCAB)
    model = GPT2LMHeadModel(cfg).to(device)
    ddp = DDP(model, device_ids=[rank], gradient_as_bucket_view=True)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    g = torch.Generator().manual_seed(99)

    def forward_backward(ids, labels):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = ddp(input_ids=ids, labels=labels).loss
        loss.backward()
        return loss.detach()

    losses = []
    for _ in range(4):
        ids, labels = batch(g, 8)
        loss = forward_backward(ids, labels)
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
    report("ddp_train_b8")

    gathered = [None] * world_size
    dist.all_gather_object(gathered, {"rank": rank, "losses": losses})
    settings = [{"accum": 2, "batch": 12} if rank == 0 else None]
    dist.broadcast_object_list(settings, src=0)
    accum, b = settings[0]["accum"], settings[0]["batch"]
    for _ in range(2):
        with ddp.no_sync():
            forward_backward(*batch(g, b))
        forward_backward(*batch(g, b))
        opt.step()
        opt.zero_grad(set_to_none=True)
    print("gathered", gathered[0]["rank"], len(gathered[0]["losses"]), "accum", accum)
    report("objects_and_no_sync_b12")

    model.eval()
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
        ids, labels = batch(g, 16)
        out = model(input_ids=ids, labels=labels)
        print("eval loss", float(out.loss), tuple(out.logits.shape))
        del out
    report("eval_b16")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(1, 6), nprocs=1, join=True)
