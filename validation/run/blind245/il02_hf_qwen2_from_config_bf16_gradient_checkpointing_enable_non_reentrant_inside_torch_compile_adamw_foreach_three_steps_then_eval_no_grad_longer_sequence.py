"""Gradient checkpointing inside a compiled model, as a Hugging Face fine-tune with
`gradient_checkpointing=True` and `torch_compile=True` runs it: a Qwen2 decoder from its config (6
layers, hidden 1024, 16 heads with 2 KV heads, SDPA, intermediate 2816, vocabulary 32000, tied
embeddings off) in pure bf16, `gradient_checkpointing_enable(use_reentrant=False)` (each decoder
layer through `torch.utils.checkpoint`, which dynamo traces as a checkpointed region; the
partitioner recomputes the layer in backward, its attention with graph-safe RNG states), then
`torch.compile(model)`; AdamW (foreach) over batch 8 x 1024, 3 steps; then evaluation under
`torch.no_grad()` in eval mode at sequence 2048 (a recompile; checkpointing is off in eval).
No value-dependent sizes. 3 phases."""

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

torch.manual_seed(2452)
V, B, T = 32000, 8, 1024


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Qwen2Config(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=6,
    num_attention_heads=16,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
    use_cache=False,
    attn_implementation="sdpa",
)
model = Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
report("setup")

for _ in range(3):
    ids = torch.randint(0, V, (B, T), device="cuda")
    loss = compiled(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss, ids
report("train_checkpointed_compiled")

model.eval()
with torch.no_grad():
    ids = torch.randint(0, V, (2, 2 * T), device="cuda")
    logits = compiled(input_ids=ids).logits
    del logits, ids
report("eval_no_grad_seq2048")
