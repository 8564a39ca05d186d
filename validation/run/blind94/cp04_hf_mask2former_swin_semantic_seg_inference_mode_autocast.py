"""HF transformers Mask2Former (Swin-T backbone, multi-scale deformable-attention pixel decoder, 9
masked-attention decoder layers, 100 queries, 150 classes) built from its config with fp32 weights
(the bare model plus its own nn.Linear class head over the last decoder state); semantic
segmentation under torch.inference_mode and bf16 autocast of a batch of 4 images at 512x512, then 2
at 768x1024: class softmax times mask sigmoid summed over the queries (einsum), upsampled bilinearly
to the image and argmaxed, as the image processor's post-processing does; 3 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import Mask2FormerConfig, Mask2FormerModel, SwinConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9404)
if SMALL:
    backbone = SwinConfig(
        embed_dim=16,
        depths=[1, 1, 1, 1],
        num_heads=[1, 2, 2, 4],
        window_size=4,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    cfg = Mask2FormerConfig(
        backbone_config=backbone,
        num_labels=5,
        num_queries=8,
        hidden_dim=32,
        mask_feature_size=32,
        feature_size=32,
        encoder_layers=1,
        decoder_layers=2,
        dim_feedforward=64,
        num_attention_heads=4,
        encoder_feedforward_dim=64,
    )
    RUNS = ((2, 64, 64), (1, 96, 128))
else:
    backbone = SwinConfig(
        embed_dim=96,
        depths=[2, 2, 6, 2],
        num_heads=[3, 6, 12, 24],
        window_size=7,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    cfg = Mask2FormerConfig(backbone_config=backbone, num_labels=150, num_queries=100)
    RUNS = ((4, 512, 512), (2, 768, 1024))
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Mask2FormerModel(cfg).to(device).eval()
# the universal-segmentation head's class predictor, kept beside the bare model (its loss needs scipy)
class_head = torch.nn.Linear(cfg.hidden_dim, cfg.num_labels + 1).to(device).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for B, H, W in RUNS:
    pixels = torch.randn(B, 3, H, W, device=device)
    with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
        out = model(pixel_values=pixels)
        classes = class_head(out.transformer_decoder_last_hidden_state).softmax(-1)[..., :-1]
        masks = out.masks_queries_logits[-1].sigmoid()
        seg = torch.einsum("bqc,bqhw->bchw", classes, masks)
        seg = F.interpolate(seg, size=(H, W), mode="bilinear", align_corners=False)
        labels = seg.argmax(dim=1)
    if device == "cuda":
        print(
            f"batch {B} image {H}x{W} masks {tuple(masks.shape)} labels {tuple(labels.shape)}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del pixels, out, classes, masks, seg, labels
