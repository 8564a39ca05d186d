"""HF BertForSequenceClassification from a BertConfig (768 wide, 12 layers, 30522 vocab, 3 labels), fp32,
AdamW with weight decay on all but biases and LayerNorm weights, get_linear_schedule_with_warmup, gradient
clipping at 1.0, padded batches with token_type_ids and an attention mask, batch 32 x 256, 3 steps, then an
eval loop under torch.no_grad collecting logits."""

import os

import torch
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1003)
if SMALL:
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=500, num_labels=3)
    BATCH, SEQ = 2, 16
else:
    config = BertConfig(num_labels=3)
    BATCH, SEQ = 32, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertForSequenceClassification(config).to(device)
decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=2e-5)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=1, num_training_steps=3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def batch():
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device=device)
    types = torch.zeros_like(ids)
    types[:, SEQ // 2 :] = 1
    lengths = torch.randint(SEQ // 2, SEQ + 1, (BATCH,), device=device)
    mask = (torch.arange(SEQ, device=device)[None] < lengths[:, None]).long()
    return ids, types, mask


for step in range(3):
    ids, types, mask = batch()
    labels = torch.randint(0, 3, (BATCH,), device=device)
    loss = model(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
all_logits = []
with torch.no_grad():
    for _ in range(4):
        ids, types, mask = batch()
        all_logits.append(model(input_ids=ids, token_type_ids=types, attention_mask=mask).logits)
logits = torch.cat(all_logits)
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
