"""HF transformers EuroBERT (Llama-style bidirectional encoder: RMSNorm, rotary, SwiGLU, grouped-query
attention) masked-language model built from a config at 8 layers, 768 wide, 12 heads with 4 KV
heads, vocabulary 32,000, fp32 weights trained under bf16 autocast with fused AdamW on right-padded
batches of 16 sequences (lengths drawn on the GPU between 128 and 512, attention mask from the
lengths, 30% of real tokens masked, -100 labels elsewhere), 3 steps, then an eval forward of the
last batch under inference_mode; 5 phases."""

import os

import torch
from transformers import EuroBertConfig, EuroBertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9306)
if SMALL:
    cfg = EuroBertConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        mask_token_id=3,
    )
    B, L, MIN = 2, 16, 8
else:
    cfg = EuroBertConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=4,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        mask_token_id=3,
    )
    B, L, MIN = 16, 512, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = EuroBertForMaskedLM(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    lengths = torch.randint(MIN, L + 1, (B,), device=device)
    attn = (torch.arange(L, device=device)[None, :] < lengths[:, None]).long()
    ids = torch.randint(4, cfg.vocab_size, (B, L), device=device) * attn
    masked = (torch.rand(B, L, device=device) < 0.3) & attn.bool()
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    inputs = ids.masked_fill(masked, 3)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(input_ids=inputs, attention_mask=attn, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del masked, labels, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    pred = model(input_ids=inputs, attention_mask=attn).logits.argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
