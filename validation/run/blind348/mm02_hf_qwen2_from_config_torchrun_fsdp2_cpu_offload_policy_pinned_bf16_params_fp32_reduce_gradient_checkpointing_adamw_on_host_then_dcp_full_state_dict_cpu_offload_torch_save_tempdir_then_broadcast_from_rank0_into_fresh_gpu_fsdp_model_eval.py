"""An HF Qwen2ForCausalLM built from a config (12 layers, d 1024, 16 query / 4 KV heads, SwiGLU 2816, vocab
32000, untied head: 0.20 B parameters) trained torchrun-style under FSDP2 with CPU offload on one GPU (a
world of one made by the script when RANK is unset): `fully_shard` on every decoder layer and on the root
with `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` and `CPUOffloadPolicy(pin_memory=True)`,
HF gradient checkpointing (`use_reentrant=False`), torch AdamW stepping on the host. Then the checkpoint of
torchtune's recipes: `get_model_state_dict` / `get_optimizer_state_dict` with
`StateDictOptions(full_state_dict=True, cpu_offload=True)` written with `torch.save` into a tempdir, and a
fresh model built on the CPU, sharded on the GPU without offload (`reshard_after_forward=False`), loaded
with `set_model_state_dict(..., broadcast_from_rank0=True)` from the file read back.
Phases: (0) group, model built and sharded with offload; (1) 2 steps of 4 x 1024 with labels (HF's loss);
(2) the full state dicts gathered to the host and saved; (3) the fresh GPU model sharded and loaded by
broadcast; then an evaluation of 8 x 1024 under no_grad and 1 step of fused AdamW at 4 x 1024 on the fresh
model. 5 phases."""

import os
import shutil
import socket
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from transformers import Qwen2Config, Qwen2ForCausalLM

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
mesh = init_device_mesh(device.type, (dist.get_world_size(),))

torch.manual_seed(3482)
if SMALL:
    cfg = dict(
        vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4
    )
    cfg.update(num_key_value_heads=2)
    B, T = 2, 64
else:
    cfg = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12)
    cfg.update(num_attention_heads=16, num_key_value_heads=4)
    B, T = 4, 1024
config = Qwen2Config(**cfg, max_position_embeddings=4096, tie_word_embeddings=False, use_cache=False)
config._attn_implementation = "sdpa"


def report(tag, reset=True):
    if use_cuda:
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        if reset:
            torch.cuda.reset_peak_memory_stats()


def batch(b):
    ids = torch.randint(0, config.vocab_size, (b, T), device=device)
    return ids, ids.clone()


mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
model = Qwen2ForCausalLM(config)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
offload = CPUOffloadPolicy(pin_memory=True) if use_cuda else OffloadPolicy()
for layer in model.model.layers:
    fully_shard(layer, mesh=mesh, mp_policy=mp, offload_policy=offload)
fully_shard(model, mesh=mesh, mp_policy=mp, offload_policy=offload)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
print("parameters", sum(p.numel() for p in model.parameters()))
report("sharded with offload")

model.train()
for step in range(2):
    ids, labels = batch(B)
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("offload step", step, loss.item())
report("offload training")

ckpt_dir = tempfile.mkdtemp(prefix="mm02_ckpt_")
options = StateDictOptions(full_state_dict=True, cpu_offload=True)
model_sd = get_model_state_dict(model, options=options)
optim_sd = get_optimizer_state_dict(model, opt, options=options)
if dist.get_rank() == 0:
    torch.save(model_sd, os.path.join(ckpt_dir, "model.pt"))
    torch.save(optim_sd, os.path.join(ckpt_dir, "optim.pt"))
dist.barrier()
print("saved", len(model_sd), "tensors to", ckpt_dir)
del model_sd, optim_sd, model, opt
report("full state dict saved")

fresh = Qwen2ForCausalLM(config)
for layer in fresh.model.layers:
    fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
fully_shard(fresh, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
full_sd = torch.load(os.path.join(ckpt_dir, "model.pt"), map_location="cpu", mmap=True, weights_only=True)
set_model_state_dict(
    fresh, full_sd, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
)
del full_sd
report("fresh model loaded by broadcast")

fresh.eval()
with torch.no_grad():
    ids, labels = batch(2 * B)
    print("eval loss", fresh(input_ids=ids, labels=labels).loss.item())
fresh.train()
opt2 = torch.optim.AdamW(fresh.parameters(), lr=2e-4, fused=use_cuda)
ids, labels = batch(B)
fresh(input_ids=ids, labels=labels).loss.backward()
opt2.step()
opt2.zero_grad(set_to_none=True)
report("fresh eval and step", reset=False)
shutil.rmtree(ckpt_dir, ignore_errors=True)
dist.destroy_process_group()
