"""CANINE-S (Clark et al. 2022): a tokenizer-free encoder over Unicode code points, random text.

Model: transformers' CanineForTokenClassification from a CanineConfig at canine-s's shape: 8 hash
functions into 16,384 buckets embed each code point, a single-layer local transformer over blocks of
128 characters, a strided Conv1d downsampling by 4 into a 12-layer deep transformer of 768, upsampling
by repetition, concatenation with the character states and a Conv1d of width 4 back to characters.
The text is code points drawn from Latin, Cyrillic, CJK and emoji ranges, wrapped in CANINE's
[CLS] = U+E000 and [SEP] = U+E001, right-padded with 0 to 2,048 characters (ragged lengths from a
seeded host RNG, attention_mask 0 on the padding), labelled with 9 BIO tags per character (-100 on
padding): character-level named-entity recognition.

Phases: the first step (fp16 autocast, GradScaler, fused AdamW, batch 16); 2 more steps; evaluation
under inference_mode at batch 32 (argmax tags and a per-character accuracy); then a
CanineForSequenceClassification (16 document classes) over 4,096-character documents with
`gradient_checkpointing_enable()` under bf16 autocast and SGD momentum at batch 4. 4 phases."""

import os
import random

import torch
from transformers import CanineConfig, CanineForSequenceClassification, CanineForTokenClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2094)
rng = random.Random(2094)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    D, LAYERS, HEADS, FF, CHARS, DOC, BATCH = 64, 2, 4, 128, 256, 512, 2
else:
    D, LAYERS, HEADS, FF, CHARS, DOC, BATCH = 768, 12, 12, 3072, 2048, 4096, 16
CLS, SEP, TAGS, CLASSES = 0xE000, 0xE001, 9, 16
RANGES = [(0x20, 0x7E), (0xC0, 0x24F), (0x400, 0x4FF), (0x4E00, 0x9FFF), (0x1F600, 0x1F64F)]


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def make_config(**extra):
    return CanineConfig(
        hidden_size=D,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FF,
        max_position_embeddings=16384,
        downsampling_rate=4,
        upsampling_kernel_size=4,
        num_hash_functions=8,
        num_hash_buckets=16384,
        local_transformer_stride=128,
        **extra,
    )


def text(n, length):
    """Code points on the host: [CLS] chars [SEP] then zero padding; lengths vary per example."""
    ids = torch.zeros(n, length, dtype=torch.long)
    mask = torch.zeros(n, length, dtype=torch.long)
    for i in range(n):
        used = rng.randint(length // 2, length)
        lo, hi = RANGES[rng.randrange(len(RANGES))]
        chars = torch.randint(lo, hi + 1, (used - 2,))
        ids[i, :used] = torch.cat([torch.tensor([CLS]), chars, torch.tensor([SEP])])
        mask[i, :used] = 1
    return ids.to(device), mask.to(device)


def ner_batch(n):
    ids, mask = text(n, CHARS)
    labels = torch.randint(0, TAGS, ids.shape, device=device).masked_fill(mask == 0, -100)
    return ids, mask, labels


model = CanineForTokenClassification(make_config(num_labels=TAGS)).to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01, fused=amp)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
model.train()
for step in range(3):
    ids, mask, labels = ner_batch(BATCH)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
    if step == 0:
        report("first step")
report("train")

model.eval()
ids, mask, labels = ner_batch(2 * BATCH)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    logits = model(input_ids=ids, attention_mask=mask).logits
    pred = logits.argmax(-1)
    valid = labels != -100
    acc = (pred == labels).logical_and(valid).sum() / valid.sum()
print(f"eval char accuracy {acc.item():.4f} logits {tuple(logits.shape)}")
del logits, pred, valid, ids, mask, labels
report("eval")

del model, opt, scaler
model = CanineForSequenceClassification(make_config(num_labels=CLASSES)).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
for step in range(2):
    ids, mask = text(max(BATCH // 4, 1), DOC)
    y = torch.randint(0, CLASSES, (max(BATCH // 4, 1),), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = model(input_ids=ids, attention_mask=mask, labels=y).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"doc classification step {step} loss {loss.item():.4f}")
report("4096-char documents checkpointed bf16")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
