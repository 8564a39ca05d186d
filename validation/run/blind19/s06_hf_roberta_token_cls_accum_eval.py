"""HF RobertaForTokenClassification from a RobertaConfig (768 wide, 12 layers, 12 heads, 9 labels),
fp32 weights under bf16 autocast, variable-length batches padded to 384 with their attention masks
(bool padding rows), two micro-batches of 16 per optimizer step (loss / 2) with AdamW, 2 steps, then an
evaluation pass under torch.inference_mode at batch 64; 3 phases."""

import os

import torch
from transformers import RobertaConfig, RobertaForTokenClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1906)
if SMALL:
    config = RobertaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        num_labels=9,
    )
    MICRO, SEQ, EVAL = 2, 16, 4
else:
    config = RobertaConfig(
        vocab_size=50265,
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        max_position_embeddings=514,
        num_labels=9,
    )
    MICRO, SEQ, EVAL = 16, 384, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
model = RobertaForTokenClassification(config).to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)


def batch(n):
    ids = torch.randint(3, config.vocab_size, (n, SEQ), device=device)
    lengths = torch.arange(n, device=device) * (SEQ // (2 * n)) + SEQ // 2
    mask = (torch.arange(SEQ, device=device)[None, :] < lengths[:, None]).long()
    ids = ids.masked_fill(mask == 0, config.pad_token_id)
    labels = torch.randint(0, 9, (n, SEQ), device=device).masked_fill(mask == 0, -100)
    return ids, mask, labels


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    for _ in range(2):
        ids, mask, labels = batch(MICRO)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss / 2
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.inference_mode():
    ids, mask, _ = batch(EVAL)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        pred = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
