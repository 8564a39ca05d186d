"""HF BertForSequenceClassification fine-tune from BertConfig: fp32 weights, fp16 autocast + GradScaler,
padded attention mask, AdamW with a linear warmup schedule."""

import os

import torch
from transformers import BertConfig, BertForSequenceClassification

HID, LAYERS, HEADS, INTER, VOCAB, B, SEQ, LABELS = (
    (64, 2, 4, 128, 1000, 4, 32, 3) if os.environ.get("SMOKE") else (768, 12, 12, 3072, 30522, 32, 384, 3)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp_dtype = torch.float16 if device == "cuda" else torch.bfloat16
torch.manual_seed(11)

config = BertConfig(
    vocab_size=VOCAB,
    hidden_size=HID,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=INTER,
    num_labels=LABELS,
    max_position_embeddings=512,
)
model = BertForSequenceClassification(config).to(device)
no_decay = ("bias", "LayerNorm.weight")
groups = [
    {"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)], "weight_decay": 0.01},
    {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)], "weight_decay": 0.0},
]
optimizer = torch.optim.AdamW(groups, lr=2e-5)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    input_ids = torch.randint(1000 if VOCAB > 1000 else 1, VOCAB, (B, SEQ), device=device)
    lengths = torch.randint(SEQ // 2, SEQ + 1, (B,), device=device)
    attention_mask = (torch.arange(SEQ, device=device)[None, :] < lengths[:, None]).long()
    input_ids = input_ids * attention_mask
    token_type_ids = torch.zeros_like(input_ids)
    labels = torch.randint(0, LABELS, (B,), device=device)
    with torch.autocast(device_type=device, dtype=amp_dtype):
        out = model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=labels
        )
    scaler.scale(out.loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.4f} scale {scaler.get_scale()} "
            f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
