"""A Hugging Face Llama from its config trained in a plain PyTorch loop with `model.compile()` (the
module's own compile: its `__call__` runs the compiled forward), as modern fine-tuning scripts do: 4
layers, hidden 1024, 16 heads with 4 KV heads (SDPA), intermediate 2816, vocabulary 32000, fp32
weights under bf16 autocast, labels passed to the model (its loss inside the compiled graph), fused
AdamW, gradient accumulation over 2 micro-batches of 4 x 512, `clip_grad_norm_`, 2 optimizer steps;
then `model.eval()` under `torch.no_grad()` (dynamo recompiles for eval mode and no grad) at batch 8;
then one more training step (the training graph's guards hold again: no recompile).
No value-dependent sizes. 4 phases."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(2451)
V, B, T, ACCUM = 32000, 4, 512, 2


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = LlamaConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=4,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=2048,
    attn_implementation="sdpa",
)
model = LlamaForCausalLM(cfg).cuda()
model.compile()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
report("setup")


def train_step():
    for _ in range(ACCUM):
        ids = torch.randint(0, V, (B, T), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        (out.loss / ACCUM).backward()
        del out, ids
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


for _ in range(2):
    train_step()
report("train_compiled_two_steps")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    ids = torch.randint(0, V, (2 * B, T), device="cuda")
    logits = model(input_ids=ids).logits
    del logits, ids
report("eval_no_grad_recompiled")

model.train()
train_step()
report("train_again")
