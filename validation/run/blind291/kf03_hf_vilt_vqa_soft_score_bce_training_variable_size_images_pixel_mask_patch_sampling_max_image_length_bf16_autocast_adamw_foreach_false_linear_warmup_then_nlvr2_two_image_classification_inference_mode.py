"""Vision-and-language with HF ViLT (model_type "vilt"): ViltForQuestionAnswering from a ViltConfig
(768 wide, 12 layers, 32-pixel patches, max_image_length 160, 1,000 answers) fine-tuned on VQA-style
batches of 24: questions right-padded to 40 tokens, images of several sizes padded into a 384 x 608
canvas with a pixel_mask (so each image's position embeddings are interpolated to its own patch grid
and ViLT samples up to 160 patches per image with multinomial draws, padding patches making up the
rest), soft VQA scores as the multi-label BCE targets; bf16 autocast, AdamW (foreach=False) with a
linear warmup schedule, 3 steps. Then a ViltForImagesAndTextClassification (NLVR2, two images per
statement, modality types for each image) on the same encoder weights, under inference_mode, at
batch 16, plus the VQA head's top-5 answers on a new batch.

Phases: 0 models built; 1 first VQA step; 2 two more steps; 3 optimizer freed, NLVR2 inference; 4 VQA
inference."""

import os

import torch
from transformers import (
    ViltConfig,
    ViltForImagesAndTextClassification,
    ViltForQuestionAnswering,
    get_linear_schedule_with_warmup,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2913)
if SMALL:
    kw = dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=300
    )
    B, T, H, W, NB = 2, 8, 96, 128, 2
    sizes = [(96, 128), (64, 96)]
else:
    kw = dict(
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        vocab_size=30522,
    )
    B, T, H, W, NB = 24, 40, 384, 608, 16
    sizes = [(384, 608), (384, 512), (320, 480), (288, 384), (384, 384), (256, 352)]
config = ViltConfig(**kw, image_size=384, patch_size=32, max_image_length=160, num_labels=1000)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def images(n, per=None):
    shape = (n, 3, H, W) if per is None else (n, per, 3, H, W)
    pixels = torch.zeros(shape)
    mask = torch.zeros((*shape[:-3], H, W), dtype=torch.long)
    flat_p, flat_m = pixels.view(-1, 3, H, W), mask.view(-1, H, W)
    for i in range(flat_p.shape[0]):
        h, w = sizes[i % len(sizes)]
        flat_p[i, :, :h, :w] = torch.randn(3, h, w)
        flat_m[i, :h, :w] = 1
    return pixels, mask


def questions(n):
    lens = torch.randint(T // 4, T + 1, (n,))
    ids = torch.randint(kw["vocab_size"] // 30, kw["vocab_size"], (n, T))
    attn = (torch.arange(T)[None, :] < lens[:, None]).long()
    ids[:, 0] = 101
    return ids * attn, attn


model = ViltForQuestionAnswering(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01, foreach=False)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=10)
report("built")

model.train()
for step in range(3):
    ids, attn = questions(B)
    pixels, pmask = images(B)
    targets = torch.zeros(B, config.num_labels)
    answers = torch.randint(0, config.num_labels, (B, 3))
    targets.scatter_(1, answers, torch.tensor([1.0, 0.6, 0.3]).expand(B, 3))
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(
            input_ids=ids.to(device),
            attention_mask=attn.to(device),
            pixel_values=pixels.to(device),
            pixel_mask=pmask.to(device),
            labels=targets.to(device),
        )
    out.loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, ids, attn, pixels, pmask, targets
    if step == 0:
        report("step0")
report("steps1-2")

del optimizer, scheduler
nlvr_cfg = ViltConfig(
    **kw,
    image_size=384,
    patch_size=32,
    max_image_length=160,
    num_images=2,
    modality_type_vocab_size=3,
    num_labels=2,
)
nlvr = ViltForImagesAndTextClassification(nlvr_cfg)
nlvr.vilt.encoder.load_state_dict(model.vilt.encoder.state_dict())
nlvr.to(device).eval()
model.eval()
with torch.inference_mode():
    ids, attn = questions(NB)
    pixels, pmask = images(NB, per=2)
    logits = nlvr(
        input_ids=ids.to(device),
        attention_mask=attn.to(device),
        pixel_values=pixels.to(device),
        pixel_mask=pmask.to(device),
    ).logits
    verdict = logits.argmax(-1).cpu()
print("nlvr2", verdict.tolist())
report("nlvr2")

with torch.inference_mode():
    ids, attn = questions(B)
    pixels, pmask = images(B)
    logits = model(
        input_ids=ids.to(device),
        attention_mask=attn.to(device),
        pixel_values=pixels.to(device),
        pixel_mask=pmask.to(device),
    ).logits
    top = logits.sigmoid().topk(5, dim=-1).indices.cpu()
print("vqa top5", tuple(top.shape))
report("vqa")
