"""Multilingual token tagging with HF transformers X-MOD (XmodForTokenClassification: a RoBERTa
whose every layer routes each row through its language's bottleneck adapter by boolean masks of
lang_ids), built from a config at 12 layers, 768 wide, adapters for 4 languages, 17 tags; each
batch of 32 sentences of random lengths is right-padded on the host, with labels of -100 on the
padding and on every third token (sub-word continuations), an attention mask and per-row language
ids drawn by a seeded Python RNG, all copied to the GPU; bf16 weights, fused AdamW, 3 steps with
the token accuracy taken over the labelled positions by boolean indexing, then an evaluation
under inference_mode of 64 sentences in two of the four languages only; 4 phases."""

import os
import random

import torch
from transformers import XmodConfig, XmodForTokenClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10105)
rng = random.Random(10105)
LANGS = ("en_XX", "de_DE", "sw_KE", "ta_IN")
TAGS = 17
if SMALL:
    cfg = XmodConfig(
        vocab_size=200,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        languages=LANGS,
        num_labels=TAGS,
    )
    B, L, STEPS = 4, 24, 2
else:
    cfg = XmodConfig(vocab_size=50000, languages=LANGS, num_labels=TAGS, max_position_embeddings=514)
    B, L, STEPS = 32, 384, 3
device = "cuda" if torch.cuda.is_available() else "cpu"


def batch(n, langs):
    ids = torch.full((n, L), cfg.pad_token_id, dtype=torch.long)
    labels = torch.full((n, L), -100, dtype=torch.long)
    mask = torch.zeros(n, L, dtype=torch.long)
    lang_ids = torch.tensor([rng.choice(langs) for _ in range(n)])
    for i in range(n):
        length = rng.randint(L // 4, L)
        ids[i, :length] = torch.randint(3, cfg.vocab_size, (length,))
        mask[i, :length] = 1
        tags = torch.randint(0, TAGS, (length,))
        tags[2::3] = -100
        labels[i, :length] = tags
    return ids.to(device), mask.to(device), labels.to(device), lang_ids.to(device)


dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = XmodForTokenClassification(cfg).to(device=device, dtype=dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    ids, mask, labels, lang_ids = batch(B, range(len(LANGS)))
    out = model(input_ids=ids, attention_mask=mask, labels=labels, lang_ids=lang_ids)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    keep = labels != -100
    acc = (out.logits.argmax(-1)[keep] == labels[keep]).float().mean()
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} acc {acc.item():.3f} tokens {int(keep.sum())}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, mask, labels, lang_ids, out, keep, acc
model.eval()
with torch.inference_mode():
    ids, mask, labels, lang_ids = batch(2 * B, (1, 3))
    logits = model(input_ids=ids, attention_mask=mask, lang_ids=lang_ids).logits
    keep = labels != -100
    acc = (logits.argmax(-1)[keep] == labels[keep]).float().mean()
if device == "cuda":
    print(
        f"eval acc {acc.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
