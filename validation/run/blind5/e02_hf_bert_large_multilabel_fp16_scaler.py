"""HF BertForSequenceClassification (BERT-large config, eager attention) fine-tuned as a multi-label
classifier (`problem_type="multi_label_classification"`, float labels, BCE inside the model): fp32 weights,
fp16 autocast + `torch.amp.GradScaler(init_scale=2**14)`, dynamically padded batches whose length changes
every step (rounded up to a multiple of 8) with padding attention masks, AdamW with decay groups, grad
clipping after `unscale_`, 4 steps; then `no_grad` scoring with sigmoid outputs moved to the host."""

import os

import torch
from transformers import BertConfig, BertForSequenceClassification

HID, LAYERS, HEADS, INTER, VOCAB, B, MAXLEN, LABELS = (
    (64, 2, 4, 128, 1000, 4, 40, 6) if os.environ.get("SMOKE") else (1024, 24, 16, 4096, 30522, 24, 512, 20)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp_dtype = torch.float16 if device == "cuda" else torch.bfloat16
torch.manual_seed(502)

config = BertConfig(
    vocab_size=VOCAB,
    hidden_size=HID,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=INTER,
    max_position_embeddings=512,
    num_labels=LABELS,
    problem_type="multi_label_classification",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    classifier_dropout=0.2,
    attn_implementation="eager",
)
model = BertForSequenceClassification(config).to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
decay, no_decay = [], []
for name, p in model.named_parameters():
    (no_decay if p.ndim < 2 or "LayerNorm" in name else decay).append(p)
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-5
)
scaler = torch.amp.GradScaler(device, init_scale=2.0**14, enabled=device == "cuda")


def collate(bsz):
    lengths = torch.randint(MAXLEN // 4, MAXLEN - 8, (bsz,))
    padded = int(((lengths.max().item() + 7) // 8) * 8)
    ids = torch.randint(1000 if VOCAB > 1000 else 5, VOCAB, (bsz, padded))
    mask = (torch.arange(padded)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    ids[:, 0] = 101 if VOCAB > 1000 else 1
    labels = (torch.rand(bsz, LABELS) < 0.15).float()
    return ids.to(device), mask.to(device), labels.to(device)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(4):
    input_ids, attention_mask, labels = collate(B)
    with torch.autocast(device_type=device, dtype=amp_dtype):
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    scaler.scale(out.loss).backward()
    scaler.unscale_(optimizer)
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} len {input_ids.shape[1]} loss {out.loss.item():.4f} gn {gn.item():.2f} "
            f"peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
scores = []
with torch.no_grad():
    for _ in range(2):
        input_ids, attention_mask, _ = collate(B * 2)
        with torch.autocast(device_type=device, dtype=amp_dtype):
            logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        scores.append(torch.sigmoid(logits.float()).cpu())
print(f"scored {torch.cat(scores).shape}")
if device == "cuda":
    print(
        f"eval peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
