"""Open-vocabulary detection serving with HF transformers OWL-ViT (CLIP ViT-B/32 image tower whose
patch tokens each predict a box and a class embedding matched against text-query embeddings),
built from a config (vision 768 wide, 12 layers at 768 x 768; text 512 wide, 12 layers, 16 tokens),
fp16 weights under torch.inference_mode: 3 images with 10 text queries each (token ids padded on the
host, EOS at each query's own length), then 2 images at 960 x 960 with interpolated position
embeddings and 6 queries each (box biases recomputed for the 30 x 30 grid); per-image top-20
query/box scores on the GPU after each; 2 phases."""

import os

import torch
from transformers import OwlViTConfig, OwlViTForObjectDetection

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10601)
if SMALL:
    text = dict(
        vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2
    )
    vision = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=128
    )
    text.update(bos_token_id=998, eos_token_id=999)
    RUNS, TOPK, PROJ = [(2, 3, 128, False), (1, 2, 160, True)], 5, 32
else:
    text = dict(
        vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8
    )
    vision = dict(
        hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12, image_size=768
    )
    text.update(bos_token_id=49406, eos_token_id=49407)
    RUNS, TOPK, PROJ = [(3, 10, 768, False), (2, 6, 960, True)], 20, 512
cfg = OwlViTConfig(text_config=text, vision_config=vision, projection_dim=PROJ)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = OwlViTForObjectDetection(cfg).to(device=device, dtype=dtype).eval()
SEQ = 16


def queries(n):
    ids = torch.zeros(n, SEQ, dtype=torch.long)
    mask = torch.zeros(n, SEQ, dtype=torch.long)
    for i in range(n):
        length = int(torch.randint(3, SEQ + 1, ()))
        ids[i, 0] = text["bos_token_id"]
        ids[i, 1 : length - 1] = torch.randint(1, text["vocab_size"] - 2, (length - 2,))
        ids[i, length - 1] = text["eos_token_id"]
        mask[i, :length] = 1
    return ids, mask


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    for images, per_image, size, interpolate in RUNS:
        ids, mask = queries(images * per_image)
        pixels = torch.randn(images, 3, size, size, device=device, dtype=dtype)
        out = model(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            pixel_values=pixels,
            interpolate_pos_encoding=interpolate,
        )
        probs = out.logits.float().sigmoid()
        best, label = probs.max(-1)
        scores, keep = best.topk(TOPK, dim=1)
        boxes = out.pred_boxes.float().gather(1, keep[..., None].expand(-1, -1, 4))
        if device == "cuda":
            print(
                f"{size} logits {tuple(out.logits.shape)} top {scores.mean().item():.4f} {tuple(boxes.shape)}"
                f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
        del ids, mask, pixels, out, probs, best, label, scores, keep, boxes
