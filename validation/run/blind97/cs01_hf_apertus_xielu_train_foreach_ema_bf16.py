"""HF transformers Apertus (Llama-style decoder with the xIELU activation, QK-norm, grouped-query
attention) built from a config at 8 layers, 1,024 wide, 16 heads with 4 KV heads, vocabulary 65,536,
bf16 weights trained with AdamW (foreach) on 8 x 1,024 tokens, an EMA copy of the weights (bf16,
decay 0.999) kept beside it by torch._foreach_mul_ / _foreach_add_ after each of 3 steps, then the
EMA weights loaded into the model for an eval loss under no_grad; 5 phases."""

import os

import torch
from transformers import ApertusConfig, ApertusForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9701)
if SMALL:
    cfg = ApertusConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    B, L = 2, 32
else:
    cfg = ApertusConfig(
        vocab_size=65536,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
    )
    B, L = 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ApertusForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
params = [p for p in model.parameters() if p.requires_grad]
ema = [p.detach().clone() for p in params]
optimizer = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    ids = torch.randint(0, cfg.vocab_size, (B, L), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        torch._foreach_mul_(ema, 0.999)
        torch._foreach_add_(ema, params, alpha=0.001)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss
backup = [p.detach().clone() for p in params]
model.eval()
with torch.no_grad():
    torch._foreach_copy_([p.data for p in params], ema)
    eval_loss = model(input_ids=ids, labels=ids).loss
    torch._foreach_copy_([p.data for p in params], backup)
if device == "cuda":
    print(
        f"eval {eval_loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
