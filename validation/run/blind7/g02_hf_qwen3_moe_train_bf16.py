"""HF Qwen3MoeForCausalLM from a small config (768 wide, 6 layers, GQA 12/4, 16 experts top-4 of
intermediate 512, 32k vocab), bf16 weights, transformers' default experts implementation, router aux
loss on, `AdamW(fused=True)`, batch 8 x 1024 with `labels=input_ids`, 2 steps; then a `no_grad`
forward at batch 16."""

import os

import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

D, LAYERS, HEADS, KV, EXPERTS, TOPK, FF, VOCAB, B, T = (
    (64, 2, 4, 2, 4, 2, 32, 300, 2, 32)
    if os.environ.get("SMOKE")
    else (768, 6, 12, 4, 16, 4, 512, 32000, 8, 1024)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(702)
config = Qwen3MoeConfig(
    vocab_size=VOCAB,
    hidden_size=D,
    intermediate_size=4 * D,
    moe_intermediate_size=FF,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    head_dim=64,
    num_experts=EXPERTS,
    num_experts_per_tok=TOPK,
    decoder_sparse_step=1,
    output_router_logits=True,
    max_position_embeddings=T,
    use_cache=False,
    tie_word_embeddings=False,
)
model = Qwen3MoeForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(2):
    ids = torch.randint(0, VOCAB, (B, T), device=device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del out
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad():
    logits = model(input_ids=torch.randint(0, VOCAB, (2 * B, T), device=device)).logits
    del logits
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
