"""Tensor parallelism on a 1-device mesh, torchrun-style (a world of one made by the script when RANK is
unset): a timm `vit_base_patch16_224` (86 M parameters, fused SDPA attention) whose 12 blocks are
`parallelize_module`-d on `init_device_mesh("cuda", (1,), mesh_dim_names=("tp",))` with the Megatron plan
(`ColwiseParallel` on `attn.qkv` and `mlp.fc1`, `RowwiseParallel` on `attn.proj` and `mlp.fc2`): those
weights become DTensors, the rest stay plain tensors; AdamW over both kinds (`foreach=False`: the foreach
kernels refuse a list mixing DTensors and tensors), bf16 autocast. Then the
checkpoints: `get_model_state_dict(StateDictOptions(full_state_dict=True, cpu_offload=True))` written with
`torch.save`, and `get_state_dict` (sharded, DTensors kept) of model and optimizer written with
`torch.distributed.checkpoint.save` into a tempdir, read back in place with `dcp.load` +
`set_state_dict`, and training resumed.
Phases: (0) group, mesh, model built and parallelized, AdamW; (1) 3 steps of 64 images at 224; (2) the
full state dict gathered to the host and saved; (3) the sharded save, load and `set_state_dict`, 1 more
step; then an evaluation of 256 images under inference_mode. 5 phases."""

import os
import shutil
import socket
import tempfile

import timm
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

SMALL = bool(os.environ.get("SMOKE"))
if "RANK" not in os.environ:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
local_rank = int(os.environ["LOCAL_RANK"])
use_cuda = torch.cuda.is_available()
if use_cuda:
    torch.cuda.set_device(local_rank)
dist.init_process_group("nccl" if use_cuda else "gloo")
device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
tp_mesh = init_device_mesh(device.type, (dist.get_world_size(),), mesh_dim_names=("tp",))

torch.manual_seed(3484)
NAME, B, R, B_EVAL = ("vit_tiny_patch16_224", 2, 224, 4) if SMALL else ("vit_base_patch16_224", 64, 224, 256)


def report(tag, reset=True):
    if use_cuda:
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        if reset:
            torch.cuda.reset_peak_memory_stats()


model = timm.create_model(NAME, pretrained=False, num_classes=1000).to(device)
plan = {
    "attn.qkv": ColwiseParallel(),
    "attn.proj": RowwiseParallel(),
    "mlp.fc1": ColwiseParallel(),
    "mlp.fc2": RowwiseParallel(),
}
for blk in model.blocks:
    parallelize_module(blk, tp_mesh, plan)
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05, foreach=False)
print("parameters", sum(p.numel() for p in model.parameters()))
report("parallelized")


def images(b):
    return torch.randn(b, 3, R, R, device=device), torch.randint(0, 1000, (b,), device=device)


def train_step():
    x, y = images(B)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
for step in range(3):
    print("tp step", step, train_step())
report("tensor parallel training")

ckpt_dir = tempfile.mkdtemp(prefix="mm04_ckpt_")
full_sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
if dist.get_rank() == 0:
    torch.save(full_sd, os.path.join(ckpt_dir, "model_full.pt"))
del full_sd
dist.barrier()
report("full state dict saved")

model_sd, optim_sd = get_state_dict(model, opt)
dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=os.path.join(ckpt_dir, "step3"))
del model_sd, optim_sd
model_sd, optim_sd = get_state_dict(model, opt)
state = {"model": model_sd, "optim": optim_sd}
dcp.load(state, checkpoint_id=os.path.join(ckpt_dir, "step3"))
set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
del state, model_sd, optim_sd
print("resumed step", train_step())
report("sharded save, load and resume")

model.eval()
with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16):
    x, y = images(B_EVAL)
    print("eval accuracy", (model(x).argmax(-1) == y).float().mean().item())
report("eval", reset=False)
shutil.rmtree(ckpt_dir, ignore_errors=True)
dist.destroy_process_group()
