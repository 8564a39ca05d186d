"""HF DeepSeek-V2-Lite-style (DeepseekV2ForCausalLM from config, bf16 weights, sdpa): multi-head latent
attention without a query LoRA (kv_lora_rank 256, 64 RoPE + 96 NoPE dims of query and key, values
of 96), the first layer dense then 32 routed experts (top-4, greedy, not renormalized) and two shared
experts a layer, 1024 wide, 8 layers, vocab 102,400. Training at batch 8 x 1024 with non-reentrant
gradient checkpointing and torch.optim.Adafactor (foreach), 3 steps; then greedy generate() of 32
tokens at batch 8 from a 512-token prompt and a sampled one returning 2 sequences each; 6 phases."""

import os

import torch
from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11606)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    config = DeepseekV2Config(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        kv_lora_rank=16,
        q_lora_rank=None,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=8,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
    )
    B, T, P, NEW = 2, 32, 16, 4
else:
    config = DeepseekV2Config(
        vocab_size=102400,
        hidden_size=1024,
        intermediate_size=4096,
        moe_intermediate_size=512,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        kv_lora_rank=256,
        q_lora_rank=None,
        qk_rope_head_dim=64,
        qk_nope_head_dim=96,
        v_head_dim=96,
        n_routed_experts=32,
        n_shared_experts=2,
        num_experts_per_tok=4,
        first_k_dense_replace=1,
        topk_method="greedy",
        norm_topk_prob=False,
    )
    B, T, P, NEW = 8, 1024, 512, 32
config._attn_implementation = "sdpa"
model = DeepseekV2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-3, foreach=True)
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
        f"greedy {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del gen
with torch.no_grad():
    gen = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=True,
        temperature=0.7,
        num_return_sequences=2,
    )
if device == "cuda":
    print(
        f"sample {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del gen, prompt
