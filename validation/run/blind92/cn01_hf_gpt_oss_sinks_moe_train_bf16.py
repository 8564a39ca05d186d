"""HF transformers GPT-OSS (attention sinks, alternating sliding-window 128 / full attention, 16
experts with top-4 routing and clamped SwiGLU) built from a config at 4 layers, 768 wide, 12 heads
with 4 KV heads, a 32,000 vocabulary, in bf16 weights with foreach AdamW, batch 4 x 512 tokens,
3 steps with the router auxiliary loss and gradient clipping, then an eval forward under no_grad;
5 phases."""

import os

import torch
from transformers import GptOssConfig, GptOssForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9201)
if SMALL:
    cfg = GptOssConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=64,
        head_dim=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=8,
        max_position_embeddings=131072,
    )
    B, L = 2, 16
else:
    cfg = GptOssConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=768,
        head_dim=64,
        num_hidden_layers=4,
        num_attention_heads=12,
        num_key_value_heads=4,
        num_local_experts=16,
        num_experts_per_tok=4,
        sliding_window=128,
        max_position_embeddings=131072,
    )
    B, L = 4, 512
cfg.output_router_logits = True
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = GptOssForCausalLM(cfg).to(device=device, dtype=dtype)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.1, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, cfg.vocab_size, (B, L), device=device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} aux {out.aux_loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, out
model.eval()
with torch.no_grad():
    ids = torch.randint(0, cfg.vocab_size, (B, L), device=device)
    logits = model(input_ids=ids).logits
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
del ids, logits
if device == "cuda":
    print(
        f"eval nll {nll.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
