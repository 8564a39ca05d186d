"""Object-detection serving with HF transformers YOLOS (a plain ViT with 100 detection tokens and
mid-layer position embeddings), YOLOS-S from a config (384 wide, 12 layers, 6 heads, 91 classes),
fp16 weights under torch.inference_mode: batch 4 at its 512 x 864 training size, then batch 2 at
800 x 1,216 (position embeddings interpolated bicubically), each followed by DETR-style
post-processing on the GPU (softmax, no-object class dropped, per-image top 50 of the queries,
cxcywh to xyxy boxes scaled to the image); 2 phases."""

import os

import torch
from transformers import YolosConfig, YolosForObjectDetection

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10502)
if SMALL:
    cfg = YolosConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=[64, 96],
        num_detection_tokens=10,
        num_labels=5,
    )
    SIZES, TOPK = [(2, 64, 96), (1, 80, 128)], 4
else:
    cfg = YolosConfig(
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=6,
        intermediate_size=1536,
        image_size=[512, 864],
        num_detection_tokens=100,
        num_labels=91,
    )
    SIZES, TOPK = [(4, 512, 864), (2, 800, 1216)], 50
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = YolosForObjectDetection(cfg).to(device=device, dtype=dtype).eval()
mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)


def postprocess(out, h, w):
    prob = out.logits.float().softmax(-1)[..., :-1]
    scores, labels = prob.max(-1)
    top, idx = scores.topk(TOPK, dim=1)
    boxes = out.pred_boxes.float().gather(1, idx.unsqueeze(-1).expand(-1, -1, 4))
    cx, cy, bw, bh = boxes.unbind(-1)
    xyxy = torch.stack([cx - 0.5 * bw, cy - 0.5 * bh, cx + 0.5 * bw, cy + 0.5 * bh], -1)
    xyxy = xyxy * torch.tensor([w, h, w, h], device=device, dtype=xyxy.dtype)
    return top, labels.gather(1, idx), xyxy


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    for b, h, w in SIZES:
        imgs = torch.rand(b, 3, h, w, device=device)
        pixel_values = ((imgs - mean) / std).to(dtype)
        out = model(pixel_values=pixel_values)
        scores, labels, boxes = postprocess(out, h, w)
        if device == "cuda":
            print(
                f"{h}x{w} {tuple(boxes.shape)} {scores.mean().item():.4f}"
                f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
        del imgs, pixel_values, out, scores, labels, boxes
