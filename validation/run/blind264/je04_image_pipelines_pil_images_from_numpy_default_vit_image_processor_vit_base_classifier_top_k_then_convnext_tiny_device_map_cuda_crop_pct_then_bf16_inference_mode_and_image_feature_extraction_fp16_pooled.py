"""Image pipelines over PIL images made from numpy (a seeded RandomState, 96 images of 160 to 640 pixels
a side, RGB, a few grayscale and RGBA ones converted by the processors), offline: processors built with
their default arguments and from-config models. `pipeline("image-classification")` on a ViT-Base
classifier (12 layers, d 768, patch 16, 1,000 labels, fp32) with `ViTImageProcessor()` (resize to
224 x 224, rescale, normalize), batch_size 16, top_k 5; then a ConvNeXt-Tiny classifier (depths 3/3/9/3,
widths 96 to 768) with `ConvNextImageProcessor(size={"shortest_edge": 224})` (resize the short side
to 224 / crop_pct 0.875 = 256, center crop 224) built with `device_map="cuda"` and no device (for an
instance the pipeline's device defaults to 0), batch_size 32; then that model cast to bf16 after the
pipeline was built (the pipeline casts its pixel values to the model's dtype) under
`torch.inference_mode()`; then `pipeline("image-feature-extraction")` over a ViT-Base encoder with its
pooler cast to fp16 before the pipeline, `pool=True`, `return_tensors=True`, batch_size 48. No
value-dependent sizes. 4 phases."""

import numpy as np
import torch
from PIL import Image
from transformers import (
    ConvNextConfig,
    ConvNextForImageClassification,
    ConvNextImageProcessor,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessor,
    ViTModel,
    pipeline,
)

torch.manual_seed(2644)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


rs = np.random.RandomState(264)
images = []
for i in range(96):
    h, w = rs.randint(160, 641, size=2)
    arr = rs.randint(0, 256, size=(h, w, 3), dtype=np.uint8)
    img = Image.fromarray(arr)
    if i % 16 == 5:
        img = img.convert("L")
    elif i % 16 == 11:
        img = img.convert("RGBA")
    images.append(img)

vit_cfg = dict(
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    image_size=224,
    patch_size=16,
)
labels = {i: f"class_{i}" for i in range(1000)}
vit = ViTForImageClassification(
    ViTConfig(**vit_cfg, id2label=labels, label2id={v: k for k, v in labels.items()})
)
clf = pipeline("image-classification", model=vit.eval(), image_processor=ViTImageProcessor(), device=0)
preds = clf(images[:64], batch_size=16, top_k=5)
print(len(preds), len(preds[0]))
report("vit_base_image_classification_fp32")

cnx_cfg = ConvNextConfig(
    depths=[3, 3, 9, 3],
    hidden_sizes=[96, 192, 384, 768],
    num_labels=1000,
    id2label=labels,
    label2id={v: k for k, v in labels.items()},
)
cnx = ConvNextForImageClassification(cnx_cfg).eval()
cnx_clf = pipeline(
    "image-classification",
    model=cnx,
    image_processor=ConvNextImageProcessor(size={"shortest_edge": 224}),
    device_map="cuda",
)
preds = cnx_clf(images, batch_size=32, top_k=3)
print(cnx_clf.device, len(preds))
report("convnext_tiny_device_map_cuda_fp32")

cnx.to(torch.bfloat16)
with torch.inference_mode():
    preds = cnx_clf(images, batch_size=32, top_k=3)
print(len(preds))
report("convnext_tiny_bf16_inference_mode")

enc = ViTModel(ViTConfig(**vit_cfg), add_pooling_layer=True).half().eval()
feats = pipeline("image-feature-extraction", model=enc, image_processor=ViTImageProcessor(), device=0)
vecs = feats(images, batch_size=48, pool=True, return_tensors=True)
print(len(vecs), vecs[0].shape, vecs[0].dtype)
report("vit_image_feature_extraction_fp16_pooled")
