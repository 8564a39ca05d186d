"""A 0.6 B Hugging Face Llama (LlamaForCausalLM from LlamaConfig: 20 layers, hidden 1536, 12 heads
with 4 key/value heads, intermediate 4096, vocab 32000, untied) built straight on the GPU and
wrapped in FSDP2 on one process, as a user checks a recipe before the cluster run:
init_process_group('nccl', rank=0, world_size=1) with MASTER_ADDR/MASTER_PORT in the environment (a
free port), fully_shard on every LlamaDecoderLayer and on the root with
MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) and reshard_after_forward=False, HF
gradient checkpointing (use_reentrant=False), 2 micro-batches of 4 x 2048 per step with the
gradient reduction skipped on the first (set_requires_gradient_sync(False)), Adam (foreach, lr 2e-4),
3 steps; then greedy generation of 32 tokens for 4 prompts of 256 under no_grad; 5 phases."""

import os
import socket

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14805)
B, T, ACCUM, STEPS = (2, 64, 2, 3) if SMALL else (4, 2048, 2, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"

with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    free = s.getsockname()[1]
os.environ["MASTER_ADDR"] = "127.0.0.1"
os.environ["MASTER_PORT"] = str(free)
os.environ.setdefault("RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("LOCAL_RANK", "0")
dist.init_process_group("nccl" if device == "cuda" else "gloo")
local_rank = int(os.environ["LOCAL_RANK"])
if device == "cuda":
    torch.cuda.set_device(local_rank)

if SMALL:
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=500, max_position_embeddings=512)
else:
    cfg = LlamaConfig(hidden_size=1536, intermediate_size=4096, num_hidden_layers=20, num_attention_heads=12,
                      num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096,
                      tie_word_embeddings=False)
with torch.device(device):
    model = LlamaForCausalLM(cfg)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for m in model.modules():
    if isinstance(m, LlamaDecoderLayer):
        fully_shard(m, mp_policy=mp, reshard_after_forward=False)
fully_shard(model, mp_policy=mp, reshard_after_forward=False)
opt = torch.optim.Adam(model.parameters(), lr=2e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    for micro in range(ACCUM):
        model.set_requires_gradient_sync(micro == ACCUM - 1)
        ids = torch.randint(0, cfg.vocab_size, (B, T), device=device)
        loss = model(input_ids=ids, labels=ids).loss / ACCUM
        loss.backward()
    opt.step()
    opt.zero_grad()
    if device == "cuda":
        print(f"step {step} loss {loss.item() * ACCUM:.4f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

del loss, ids
model.eval()
model.config.use_cache = True
prompts = torch.randint(0, cfg.vocab_size, (4, 256 if not SMALL else 16), device=device)
with torch.no_grad():
    out = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=32, do_sample=False,
                         pad_token_id=0)
if device == "cuda":
    print(f"generate {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
dist.destroy_process_group()
