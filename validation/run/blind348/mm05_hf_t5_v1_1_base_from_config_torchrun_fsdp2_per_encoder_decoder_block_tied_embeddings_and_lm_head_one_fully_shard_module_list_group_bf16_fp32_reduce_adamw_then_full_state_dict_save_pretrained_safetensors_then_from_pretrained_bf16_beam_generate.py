"""An HF T5 v1.1-base-like encoder-decoder from a config (12 + 12 blocks, d 768, 12 heads, gated-GELU 2048,
vocab 32128: 0.25 B parameters) trained torchrun-style under FSDP2 on one GPU (a world of one made by the
script when RANK is unset): `fully_shard` on every encoder and decoder block, one `fully_shard` over a list
of modules for the tied embedding (`shared`, both stacks' `embed_tokens` and `lm_head` share one weight;
`shared` itself never runs forward, but leaving it out unties it; the group kept unsharded after forward),
and the root, all with `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`; AdamW (foreach over
DTensors). Then the HF export of FSDP users: `get_model_state_dict` with `full_state_dict=True,
cpu_offload=True` passed to `save_pretrained(state_dict=...)` (safetensors) in a tempdir, the FSDP model
freed, and `from_pretrained(dtype=bfloat16)` on the GPU for beam search.
Phases: (0) group, model built on the CPU and sharded onto the GPU, AdamW; (1) 3 steps of 16 x 512 inputs,
128 labels; (2) the full state dict gathered and saved with `save_pretrained`; (3) the FSDP model and
optimizer freed and the checkpoint loaded in bf16 by `from_pretrained`; then `generate` with 4 beams and 64
new tokens for 8 x 512 inputs under inference_mode. 5 phases."""

import os
import shutil
import socket
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import T5Config, T5ForConditionalGeneration

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

torch.manual_seed(3485)
if SMALL:
    cfg = dict(vocab_size=512, d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16)
    B, S, TGT, NEW = 2, 32, 8, 4
else:
    cfg = dict(vocab_size=32128, d_model=768, d_ff=2048, num_layers=12, num_heads=12, d_kv=64)
    B, S, TGT, NEW = 16, 512, 128, 64
config = T5Config(**cfg, feed_forward_proj="gated-gelu", dropout_rate=0.1, decoder_start_token_id=0)
config._attn_implementation = "eager"


def report(tag, reset=True):
    if use_cuda:
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        if reset:
            torch.cuda.reset_peak_memory_stats()


model = T5ForConditionalGeneration(config)
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for stack in (model.encoder, model.decoder):
    for block in stack.block:
        fully_shard(block, mesh=mesh, mp_policy=mp)
fully_shard(
    [model.shared, model.encoder.embed_tokens, model.decoder.embed_tokens, model.lm_head],
    mesh=mesh,
    mp_policy=mp,
    reshard_after_forward=False,
)
fully_shard(model, mesh=mesh, mp_policy=mp)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
print("parameters", sum(p.numel() for p in model.parameters()))
report("sharded")

model.train()
for step in range(3):
    src = torch.randint(1, config.vocab_size, (B, S), device=device)
    labels = torch.randint(1, config.vocab_size, (B, TGT), device=device)
    loss = model(input_ids=src, attention_mask=torch.ones_like(src), labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("fsdp step", step, loss.item())
report("fsdp training")

out_dir = tempfile.mkdtemp(prefix="mm05_hf_")
full_sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
if dist.get_rank() == 0:
    model.save_pretrained(out_dir, state_dict=full_sd)
dist.barrier()
print("saved", sorted(os.listdir(out_dir)))
del full_sd
report("save_pretrained")

del model, opt, loss
hf = T5ForConditionalGeneration.from_pretrained(out_dir, dtype=torch.bfloat16).to(device)
hf.eval()
report("from_pretrained bf16")

with torch.inference_mode():
    src = torch.randint(1, config.vocab_size, (B // 2, S), device=device)
    out = hf.generate(
        input_ids=src,
        attention_mask=torch.ones_like(src),
        num_beams=4,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        early_stopping=False,
    )
print("generated", tuple(out.shape))
report("beam generate", reset=False)
shutil.rmtree(out_dir, ignore_errors=True)
dist.destroy_process_group()
