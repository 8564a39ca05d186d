"""HF ModernBertForMaskedLM from a ModernBertConfig (768 wide, 12 layers, 12 heads, global attention every
third layer and a 128-token local window elsewhere, GeGLU MLP, 50,368 vocabulary), bf16 autocast over fp32
weights, 30% of tokens masked (labels -100 elsewhere), AdamW, batch 8 at 1024 tokens with padding in the
attention mask, 2 steps."""

import os

import torch
from transformers import ModernBertConfig, ModernBertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1808)
if SMALL:
    config = ModernBertConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        local_attention=8,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        cls_token_id=1,
        sep_token_id=2,
    )
    BATCH, SEQ = 2, 16
else:
    config = ModernBertConfig(
        vocab_size=50368,
        hidden_size=768,
        intermediate_size=1152,
        num_hidden_layers=12,
        num_attention_heads=12,
        global_attn_every_n_layers=3,
        local_attention=128,
        max_position_embeddings=8192,
    )
    BATCH, SEQ = 8, 1024
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ModernBertForMaskedLM(config).to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(5, config.vocab_size, (BATCH, SEQ), device=device)
    mask = torch.ones_like(ids)
    mask[BATCH // 2 :, SEQ - SEQ // 4 :] = 0
    chosen = torch.rand(BATCH, SEQ, device=device) < 0.3
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_ids=ids.masked_fill(chosen, 4), attention_mask=mask, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
