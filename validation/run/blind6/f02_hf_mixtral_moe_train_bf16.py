"""HF MixtralForCausalLM from a small MixtralConfig (1024 wide, 8 layers, GQA 16/4, 8 experts top-2 of
intermediate 2816, 32k vocab, untied; 640M parameters), bf16 weights, transformers' default experts
implementation, `output_router_logits=True` (the load-balancing aux loss joins the loss), AdamW (foreach
default), batch 12 x 2048 with `labels=input_ids`, 2 steps; then a `no_grad` forward at batch 24."""

import os

import torch
from transformers import MixtralConfig, MixtralForCausalLM

D, FF, LAYERS, HEADS, KV, EXPERTS, VOCAB, B, T = (
    (64, 128, 2, 4, 2, 4, 300, 2, 32)
    if os.environ.get("SMOKE")
    else (1024, 2816, 8, 16, 4, 8, 32000, 12, 2048)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(602)

config = MixtralConfig(
    vocab_size=VOCAB,
    hidden_size=D,
    intermediate_size=FF,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    num_local_experts=EXPERTS,
    num_experts_per_tok=2,
    max_position_embeddings=T,
    output_router_logits=True,
    router_aux_loss_coef=0.02,
    use_cache=False,
    tie_word_embeddings=False,
)
model = MixtralForCausalLM(config).to(device=device, dtype=torch.bfloat16)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    input_ids = torch.randint(0, VOCAB, (B, T), device=device)
    out = model(input_ids=input_ids, labels=input_ids)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} aux {out.aux_loss.item():.4f} "
            f"peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out

model.eval()
with torch.no_grad():
    logits = model(input_ids=torch.randint(0, VOCAB, (2 * B, T), device=device)).logits
    print(f"eval logits {tuple(logits.shape)}")
    del logits
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
