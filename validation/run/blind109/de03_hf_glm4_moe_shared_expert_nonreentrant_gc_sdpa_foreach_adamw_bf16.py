"""HF GLM-4-MoE built from a config: 8 layers of 1024 wide (the first dense, then 16 routed experts
of 512, top 4 with grouped sigmoid routing and a shared expert), partial rotary, query/key norms,
16 heads with 4 KV heads, a 48,000-symbol vocabulary; bf16 weights, SDPA attention, transformers'
gradient checkpointing in its non-reentrant form, foreach AdamW with a linear warm-up, batches of 4
sequences of 2,048 tokens (labels from input ids), 3 steps, then the same batch under no_grad
without checkpointing; 5 phases."""

import os

import torch
from transformers import Glm4MoeConfig, Glm4MoeForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10903)
device = "cuda" if torch.cuda.is_available() else "cpu"
V = 500 if SMALL else 48000
B, T = (2, 64) if SMALL else (4, 2048)
cfg = Glm4MoeConfig(
    vocab_size=V,
    hidden_size=64 if SMALL else 1024,
    intermediate_size=128 if SMALL else 2816,
    num_hidden_layers=3 if SMALL else 8,
    num_attention_heads=4 if SMALL else 16,
    num_key_value_heads=2 if SMALL else 4,
    head_dim=16 if SMALL else 64,
    moe_intermediate_size=32 if SMALL else 512,
    n_routed_experts=4 if SMALL else 16,
    num_experts_per_tok=2 if SMALL else 4,
    n_shared_experts=1,
    n_group=2 if SMALL else 4,
    topk_group=1 if SMALL else 2,
    first_k_dense_replace=1,
    use_qk_norm=True,
    max_position_embeddings=4096,
    use_cache=False,
)
cfg._attn_implementation = "sdpa"
model = Glm4MoeForCausalLM(cfg).to(device, torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), foreach=True)
sched = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 100))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, V, (B, T), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    sched.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss
model.eval()
model.gradient_checkpointing_disable()
with torch.no_grad():
    loss = model(input_ids=ids, labels=ids).loss
if device == "cuda":
    print(
        f"eval {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
