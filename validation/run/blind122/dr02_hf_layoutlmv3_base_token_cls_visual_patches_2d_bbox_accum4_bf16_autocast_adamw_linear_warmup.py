"""HF LayoutLMv3-base built from its config (12 layers of width 768, text tokens with 1-D and 2-D
layout positions from word boxes, 16 x 16 visual patches of a 224 x 224 page image appended to the
sequence, relative 1-D and 2-D attention biases), fine-tuned for FUNSD-style token classification (7
labels, padding labelled -100): bf16 autocast, 4 accumulated micro-batches of 8 documents of 512
tokens, AdamW with a linear warmup schedule, gradient clipping at 1.0; 2
updates, then an evaluation under inference_mode over 2 batches of 16 with the argmax tags; 4 phases."""

import os

import torch
from transformers import LayoutLMv3Config, LayoutLMv3ForTokenClassification, get_linear_schedule_with_warmup

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12202)
B, L, ACCUM = (2, 64, 2) if SMALL else (8, 512, 4)
NUM_LABELS = 7
device = "cuda" if torch.cuda.is_available() else "cpu"

config = LayoutLMv3Config(
    num_labels=NUM_LABELS,
    num_hidden_layers=2 if SMALL else 12,
    hidden_size=192 if SMALL else 768,
    coordinate_size=32 if SMALL else 128,
    shape_size=32 if SMALL else 128,
    num_attention_heads=4 if SMALL else 12,
    intermediate_size=256 if SMALL else 3072,
)
model = LayoutLMv3ForTokenClassification(config).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=10, num_training_steps=1000)


def document_batch(n):
    input_ids = torch.randint(5, config.vocab_size, (n, L), device=device)
    lengths = torch.randint(L // 2, L + 1, (n,))
    attention_mask = (torch.arange(L)[None] < lengths[:, None]).long().to(device)
    x0 = torch.randint(0, 900, (n, L, 1), device=device)
    y0 = torch.randint(0, 950, (n, L, 1), device=device)
    bbox = torch.cat([x0, y0, x0 + torch.randint(5, 100, (n, L, 1), device=device), y0 + 40], -1)
    pixel_values = torch.randn(n, 3, 224, 224, device=device)
    labels = torch.randint(0, NUM_LABELS, (n, L), device=device).masked_fill(attention_mask == 0, -100)
    return input_ids, attention_mask, bbox, pixel_values, labels


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for update in range(2):
    for _micro in range(ACCUM):
        input_ids, attention_mask, bbox, pixel_values, labels = document_batch(B)
        with torch.autocast(device, dtype=torch.bfloat16):
            out = model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                bbox=bbox,
                pixel_values=pixel_values,
                labels=labels,
            )
        (out.loss / ACCUM).backward()
        del out
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"update {update} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
correct = total = 0
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    for _ in range(2):
        input_ids, attention_mask, bbox, pixel_values, labels = document_batch(2 * B)
        logits = model(
            input_ids=input_ids, attention_mask=attention_mask, bbox=bbox, pixel_values=pixel_values
        ).logits
        pred = logits.argmax(-1)
        valid = labels != -100
        correct += int((pred[valid] == labels[valid]).sum())
        total += int(valid.sum())
if device == "cuda":
    print(
        f"eval acc {correct / total:.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
