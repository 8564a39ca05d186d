"""HF X-CLIP base/16 built from its config (a ViT-B/16 over 8 frames of 224 x 224 with cross-frame
communication tokens, a one-layer multi-frame integration transformer, a 12-layer CLIP text encoder
of 77 tokens and the video-specific prompt generator of 2 layers), trained video-text contrastive
(model's own loss over the batch) under fp16 autocast with GradScaler, AdamW with the text tower at a
tenth of the lr, 16 clips with their captions per step, 3 steps; then zero-shot classification under
no_grad and fp16 autocast of 24 clips against 400 class prompts (their text features encoded once),
then the same clips' logits from the full model over 64 prompts; 5 phases."""

import os

import torch
from transformers import XCLIPConfig, XCLIPModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12206)
B, FRAMES, IMG, CLASSES, EVAL_B = (2, 4, 64, 10, 3) if SMALL else (16, 8, 224, 400, 24)
device = "cuda" if torch.cuda.is_available() else "cpu"

layers = 2 if SMALL else 12
config = XCLIPConfig(
    text_config={"num_hidden_layers": layers},
    vision_config={"num_hidden_layers": layers, "patch_size": 16, "num_frames": FRAMES, "image_size": IMG},
)
model = XCLIPModel(config).to(device)
text_params = [p for n, p in model.named_parameters() if n.startswith("text_model")]
other_params = [p for n, p in model.named_parameters() if not n.startswith("text_model")]
opt = torch.optim.AdamW(
    [{"params": other_params}, {"params": text_params, "lr": 8e-7}], lr=8e-6, weight_decay=0.001
)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")


def captions(n, length):
    ids = torch.randint(3, config.text_config.vocab_size, (n, 77), device=device)
    mask = (torch.arange(77, device=device)[None] < length).long().expand(n, -1).contiguous()
    ids[:, length - 1] = 2
    return ids * mask + (1 - mask), mask


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    videos = torch.randn(B, FRAMES, 3, IMG, IMG, device=device)
    input_ids, attention_mask = captions(B, 32)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        out = model(input_ids=input_ids, attention_mask=attention_mask, pixel_values=videos, return_loss=True)
    opt.zero_grad(set_to_none=True)
    scaler.scale(out.loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del videos, input_ids, attention_mask, out

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    class_ids, class_mask = captions(CLASSES, 12)
    text_features = model.get_text_features(input_ids=class_ids, attention_mask=class_mask).pooler_output
    videos = torch.randn(EVAL_B, FRAMES, 3, IMG, IMG, device=device)
    video_features = model.get_video_features(pixel_values=videos).pooler_output
    sims = (
        torch.nn.functional.normalize(video_features.float(), dim=-1)
        @ torch.nn.functional.normalize(text_features.float(), dim=-1).T
    )
    top5 = sims.topk(5, dim=-1).indices
if device == "cuda":
    print(
        f"zero-shot {tuple(top5.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    out = model(input_ids=class_ids[:64], attention_mask=class_mask[:64], pixel_values=videos)
    probs = out.logits_per_video.float().softmax(-1)
if device == "cuda":
    print(
        f"full {tuple(probs.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
