"""A Hugging Face BERT-large sequence classifier (24 layers, d 1024, built from a BertConfig, 3 labels:
0.33 B parameters) fine-tuned with the FSDP1 wrapper as a torchrun program on one GPU. The process group is
made with both backends, `init_process_group('cpu:gloo,cuda:nccl')` (what `dcp.async_save` asks for);
without RANK in the environment the script sets torchrun's variables itself (a world of one, a free
port). FSDP: `transformer_auto_wrap_policy` on BertLayer, SHARD_GRAD_OP, `use_orig_params=True`,
MixedPrecision fp16 parameters with fp32 reduction and buffers, `device_id`, `sync_module_states`,
`limit_all_gathers`, `forward_prefetch`, BACKWARD_PRE; AdamW (foreach) with no weight decay on biases
and LayerNorms, `ShardedGradScaler` (initial scale 256), FSDP's `clip_grad_norm_`.
Phases: (0) group, model built on the host and wrapped (moved to the GPU); (1) 4 steps of 16 x 512;
(2) a SHARDED_STATE_DICT of the model and `FSDP.optim_state_dict` handed to `dcp.async_save` in a
temporary directory, one training step while it writes, then the future's result; (3) the checkpoint
read back with `dcp.load` into the model's own sharded state dict and `load_state_dict`; (4)
`summon_full_params` (no writeback) for the weights' norms, then evaluation of 2 batches under no_grad.
5 phases."""

import functools
import os
import shutil
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
from transformers import BertConfig, BertForSequenceClassification
from transformers.models.bert.modeling_bert import BertLayer

if "RANK" not in os.environ:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
dist.init_process_group("cpu:gloo,cuda:nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)

torch.manual_seed(3395)
B, T = 16, 512
config = BertConfig(
    vocab_size=30522,
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=16,
    intermediate_size=4096,
    num_labels=3,
    attn_implementation="sdpa",
)
model = BertForSequenceClassification(config)
model = FSDP(
    model,
    auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={BertLayer}),
    sharding_strategy=ShardingStrategy.SHARD_GRAD_OP,
    mixed_precision=MixedPrecision(
        param_dtype=torch.float16, reduce_dtype=torch.float32, buffer_dtype=torch.float32
    ),
    device_id=torch.cuda.current_device(),
    sync_module_states=True,
    use_orig_params=True,
    limit_all_gathers=True,
    forward_prefetch=True,
    backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
)
no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
    lr=2e-5,
    foreach=True,
)
scaler = ShardedGradScaler(init_scale=2.0**8)  # a fresh model: start low, skip no step
torch.cuda.reset_peak_memory_stats()


def batch():
    ids = torch.randint(0, config.vocab_size, (B, T), device="cuda")
    mask = torch.ones(B, T, dtype=torch.long, device="cuda")
    mask[B // 2 :, T - 96 :] = 0
    return ids, mask, torch.randint(0, 3, (B,), device="cuda")


def train_step():
    ids, mask, labels = batch()
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    scaler.scale(out.loss).backward()
    scaler.unscale_(opt)
    model.clip_grad_norm_(1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    return out.loss.detach()


model.train()
for _ in range(4):
    loss = train_step()
print("train loss", loss.item())
torch.cuda.reset_peak_memory_stats()

ckpt = tempfile.mkdtemp(prefix="mb05_")
with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
    state = {"model": model.state_dict(), "optim": FSDP.optim_state_dict(model, opt)}
future = dcp.async_save(state, checkpoint_id=ckpt)
loss = train_step()
future.result()
del state
torch.cuda.reset_peak_memory_stats()

with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=ckpt)
    model.load_state_dict(state["model"])
del state
torch.cuda.reset_peak_memory_stats()

with FSDP.summon_full_params(model, writeback=False):
    norms = [p.detach().float().norm() for p in model.parameters()]
print("weight norm", torch.stack(norms).norm().item())
model.eval()
correct = torch.zeros((), device="cuda")
with torch.no_grad():
    for _ in range(2):
        ids, mask, labels = batch()
        correct += (model(input_ids=ids, attention_mask=mask).logits.argmax(-1) == labels).sum()
dist.all_reduce(correct)
print("eval accuracy", correct.item() / (2 * B * dist.get_world_size()))
shutil.rmtree(ckpt, ignore_errors=True)
dist.destroy_process_group()
