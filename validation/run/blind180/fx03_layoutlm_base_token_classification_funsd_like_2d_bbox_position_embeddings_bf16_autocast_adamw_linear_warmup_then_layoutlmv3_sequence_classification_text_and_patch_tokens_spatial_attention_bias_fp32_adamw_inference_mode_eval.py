"""LayoutLM-style document understanding after Xu et al. 2020 ("LayoutLM: Pre-training of Text and
Layout for Document Image Understanding") and Huang et al. 2022 (LayoutLMv3), from transformers configs
with no downloads. First LayoutLMForTokenClassification at LayoutLM-base's sizes (768, 12 layers, 12
heads, 1,024 2-D positions: x0/y0/x1/y1 plus width and height embeddings added to word, 1-D position and
token-type embeddings) labelling FUNSD-like forms with 7 BIO classes: batch 16 x 512 tokens, word boxes
drawn on a 0..1000 grid with padding tokens masked (-100 labels, attention mask), bf16 autocast, AdamW
(lr 5e-5) with a linear warmup schedule (get_linear_schedule_with_warmup), the first step its own phase,
then 3 steps; evaluation of 4 batches of 32 under no_grad (argmax and token accuracy). Then a
LayoutLMv3ForSequenceClassification (LayoutLMv3-base: 768, 12 layers, text tokens plus 14 x 14 = 196
patch tokens of a 224 x 224 page and its [CLS], RoBERTa-style 1-D positions offset past the padding
index (514 of them), 1-D relative and 2-D spatial attention biases over the 709 positions) for
RVL-CDIP's 16 classes, trained in fp32 with AdamW (lr 2e-5) and gradient clipping, 3 steps at batch 8,
then evaluated under inference_mode at batch 32; 5 phases."""

import os

import torch
from transformers import (
    LayoutLMConfig,
    LayoutLMForTokenClassification,
    LayoutLMv3Config,
    LayoutLMv3ForSequenceClassification,
    get_linear_schedule_with_warmup,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18003)
if SMALL:
    H, L, HEADS, SEQ, B, STEPS, EVAL_B, EVAL_N, V3_SEQ, V3_B, V3_EVAL_B, IMG = (
        48,
        2,
        2,
        32,
        2,
        2,
        2,
        1,
        16,
        2,
        2,
        32,
    )
else:
    H, L, HEADS, SEQ, B, STEPS, EVAL_B, EVAL_N, V3_SEQ, V3_B, V3_EVAL_B, IMG = (
        768,
        12,
        12,
        512,
        16,
        4,
        32,
        4,
        512,
        8,
        32,
        224,
    )
NUM_LABELS = 7
device = "cuda" if torch.cuda.is_available() else "cpu"


def layout_batch(bs, seq, vocab):
    input_ids = torch.randint(1000, vocab, (bs, seq), device=device)
    n_real = torch.randint(seq // 2, seq + 1, (bs, 1), device=device)
    pos = torch.arange(seq, device=device)[None, :]
    attention_mask = (pos < n_real).long()
    input_ids = input_ids * attention_mask
    x0 = torch.randint(0, 900, (bs, seq, 1), device=device)
    y0 = torch.randint(0, 950, (bs, seq, 1), device=device)
    w = torch.randint(10, 100, (bs, seq, 1), device=device)
    h = torch.randint(8, 50, (bs, seq, 1), device=device)
    bbox = torch.cat([x0, y0, (x0 + w).clamp(max=1000), (y0 + h).clamp(max=1000)], dim=-1)
    bbox = bbox * attention_mask[..., None]
    return input_ids, bbox, attention_mask


cfg = LayoutLMConfig(
    hidden_size=H,
    num_hidden_layers=L,
    num_attention_heads=HEADS,
    intermediate_size=4 * H,
    max_2d_position_embeddings=1024,
    num_labels=NUM_LABELS,
)
model = LayoutLMForTokenClassification(cfg).to(device)
print(f"layoutlm params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=STEPS)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    input_ids, bbox, attention_mask = layout_batch(B, SEQ, cfg.vocab_size)
    labels = torch.randint(0, NUM_LABELS, (B, SEQ), device=device).masked_fill(attention_mask == 0, -100)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        outputs = model(input_ids=input_ids, bbox=bbox, attention_mask=attention_mask, labels=labels)
    optimizer.zero_grad(set_to_none=True)
    outputs.loss.backward()
    optimizer.step()
    scheduler.step()
    print(f"step {step} loss {outputs.loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del outputs, input_ids, bbox, attention_mask, labels
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
correct, total = 0, 0
with torch.no_grad():
    for _ in range(EVAL_N):
        input_ids, bbox, attention_mask = layout_batch(EVAL_B, SEQ, cfg.vocab_size)
        labels = torch.randint(0, NUM_LABELS, (EVAL_B, SEQ), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(input_ids=input_ids, bbox=bbox, attention_mask=attention_mask).logits
        pred = logits.argmax(-1)
        correct += int(((pred == labels) & (attention_mask == 1)).sum())
        total += int(attention_mask.sum())
print(f"token accuracy {correct / total:.4f}")
del logits, pred, input_ids, bbox, attention_mask, labels
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, optimizer, scheduler
v3_cfg = LayoutLMv3Config(
    hidden_size=H,
    num_hidden_layers=L,
    num_attention_heads=HEADS,
    intermediate_size=4 * H,
    input_size=IMG,
    max_position_embeddings=514,
    patch_size=16,
    max_2d_position_embeddings=1024,
    coordinate_size=H // 6 if not SMALL else 8,
    shape_size=H // 6 if not SMALL else 8,
    has_relative_attention_bias=True,
    has_spatial_attention_bias=True,
    visual_embed=True,
    num_labels=16,
)
v3 = LayoutLMv3ForSequenceClassification(v3_cfg).to(device)
print(f"layoutlmv3 params {sum(p.numel() for p in v3.parameters())}")
v3_opt = torch.optim.AdamW(v3.parameters(), lr=2e-5, weight_decay=0.01)
v3.train()
for step in range(3):
    input_ids, bbox, attention_mask = layout_batch(V3_B, V3_SEQ, v3_cfg.vocab_size)
    pixel_values = torch.randn(V3_B, 3, IMG, IMG, device=device)
    labels = torch.randint(0, 16, (V3_B,), device=device)
    out = v3(
        input_ids=input_ids,
        bbox=bbox,
        attention_mask=attention_mask,
        pixel_values=pixel_values,
        labels=labels,
    )
    v3_opt.zero_grad(set_to_none=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(v3.parameters(), 1.0)
    v3_opt.step()
    print(f"v3 step {step} loss {out.loss.item():.4f}")
del out, input_ids, bbox, attention_mask, pixel_values, labels
if device == "cuda":
    print(f"v3 train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

v3.eval()
with torch.inference_mode():
    input_ids, bbox, attention_mask = layout_batch(V3_EVAL_B, V3_SEQ, v3_cfg.vocab_size)
    pixel_values = torch.randn(V3_EVAL_B, 3, IMG, IMG, device=device)
    probs = v3(
        input_ids=input_ids, bbox=bbox, attention_mask=attention_mask, pixel_values=pixel_values
    ).logits.softmax(-1)
print(f"v3 eval {tuple(probs.shape)} top {probs.max().item():.4f}")
if device == "cuda":
    print(
        f"v3 eval allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
