"""A Hugging Face causal LM compiled with `dynamic=True` and trained on varying lengths: Qwen2 from its config
(4 layers, hidden 768, 12 heads with 4 KV heads through SDPA, MLP 2048, vocab 32000, untied head; fp32
weights), `torch.compile(model, dynamic=True)` (sizes symbolic from the first call: one graph for every
length), bf16 autocast, the model's own loss from `labels`, foreach `clip_grad_norm_`, fused AdamW, batch 4 at
lengths 200 and 328, then 264 and 456 (the same graphs); then `eval()` and no_grad scoring at 2 x 1000 and
8 x 120 (one dynamic inference graph, batch and length symbolic).

Sizes are fixed by the program (no value-dependent sizes). 4 phases."""

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

torch.manual_seed(2633)
V, B = 32000, 4


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Qwen2Config(
    vocab_size=V,
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=4,
    num_attention_heads=12,
    num_key_value_heads=4,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
    attn_implementation="sdpa",
)
model = Qwen2ForCausalLM(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
compiled = torch.compile(model, dynamic=True)
report("setup")


def train_step(t):
    ids = torch.randint(0, V, (B, t), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = compiled(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


model.train()
for t in (200, 328):
    train_step(t)
report("train_dynamic_true_lengths_200_328")

for t in (264, 456):
    train_step(t)
report("train_lengths_264_456_same_graphs")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for b, t in ((2, 1000), (8, 120)):
        logits = compiled(input_ids=torch.randint(0, V, (b, t), device="cuda")).logits
        del logits
report("eval_no_grad_dynamic_batch_and_length")
