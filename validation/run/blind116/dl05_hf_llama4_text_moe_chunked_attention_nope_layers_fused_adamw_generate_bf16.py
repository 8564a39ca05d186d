"""HF Llama 4 text (Llama4ForCausalLM from Llama4TextConfig, bf16 weights, sdpa): 8 layers 1536 wide,
MoE every second layer (16 experts, top-1, a shared expert, experts as batched gate_up/down
parameters), dense MLPs between, chunked local attention (chunk 512) with every fourth layer a
global NoPE layer with attention temperature tuning, QK norm, vocab 202,048. Training at batch 4 x
1536 with non-reentrant gradient checkpointing and fused AdamW, 3 steps; then greedy generate() of
48 tokens from a 1024-token prompt at batch 4 (its static-shaped chunked cache); 5 phases."""

import os

import torch
from transformers import Llama4ForCausalLM, Llama4TextConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11605)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    config = Llama4TextConfig(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=64,
        intermediate_size_mlp=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_local_experts=4,
        interleave_moe_layer_step=2,
        attention_chunk_size=16,
    )
    B, T, P, NEW = 2, 48, 24, 4
else:
    config = Llama4TextConfig(
        vocab_size=202048,
        hidden_size=1536,
        intermediate_size=2048,
        intermediate_size_mlp=4096,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=4,
        head_dim=128,
        num_local_experts=16,
        num_experts_per_tok=1,
        interleave_moe_layer_step=2,
        attention_chunk_size=512,
    )
    B, T, P, NEW = 4, 1536, 1024, 48
config._attn_implementation = "sdpa"
model = Llama4ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out, ids
model.eval()
prompt = torch.randint(0, config.vocab_size, (B, P), device=device)
with torch.no_grad():
    gen = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
if device == "cuda":
    print(
        f"generate {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del gen, prompt
optimizer.zero_grad(set_to_none=True)
if device == "cuda":
    torch.cuda.empty_cache()
    print(f"end allocated {torch.cuda.memory_allocated()}", f"reserved {torch.cuda.memory_reserved()}")
