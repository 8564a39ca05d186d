"""Semantic segmentation on a DINOv3 backbone (transformers 5.17's `DINOv3ViTModel`) the way the DINOv3
linear-probe / fine-tune recipes do it: a ViT-L/16 from config (24 layers of d 1,024, 16 heads, MLP
4,096, 4 register tokens, 2-D RoPE on patch coordinates with the training-time coordinate rescale
augmentation, LayerScale 1e-5, stochastic depth 0.1, SDPA) under a linear head (BatchNorm2d and a
1x1 convolution from the patch tokens to 150 classes, bilinear upsampling to the 512 x 512 input,
cross-entropy with an ignore index). fp32 weights trained under bf16 autocast with non-reentrant
gradient checkpointing on the backbone, fused AdamW with layer-wise learning-rate decay (one
parameter group per layer, 0.9 per layer), 5 steps of batch 8 at 512 x 512 (1,024 patches + class +
4 registers); then inference at 768 x 768 (2,304 patches, RoPE needs no interpolation) under
`torch.inference_mode()` and bf16 autocast, batch 4, the class map by argmax. No value-dependent
sizes. 3 phases."""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DINOv3ViTConfig, DINOv3ViTModel

torch.manual_seed(2664)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = DINOv3ViTConfig(
    patch_size=16,
    hidden_size=1024,
    intermediate_size=4096,
    num_hidden_layers=24,
    num_attention_heads=16,
    num_register_tokens=4,
    layerscale_value=1e-5,
    drop_path_rate=0.1,
    image_size=512,
    pos_embed_rescale=2.0,
)


class Segmenter(nn.Module):
    def __init__(self, classes=150):
        super().__init__()
        self.backbone = DINOv3ViTModel(cfg)
        self.bn = nn.BatchNorm2d(cfg.hidden_size)
        self.cls = nn.Conv2d(cfg.hidden_size, classes, 1)

    def forward(self, pixels):
        h, w = pixels.shape[-2] // cfg.patch_size, pixels.shape[-1] // cfg.patch_size
        tokens = self.backbone(pixel_values=pixels).last_hidden_state
        patches = tokens[:, 1 + cfg.num_register_tokens :]
        feat = patches.transpose(1, 2).reshape(pixels.shape[0], cfg.hidden_size, h, w)
        logits = self.cls(self.bn(feat))
        return F.interpolate(logits, size=pixels.shape[-2:], mode="bilinear", align_corners=False)


model = Segmenter().cuda()
model.backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
groups = [{"params": list(model.bn.parameters()) + list(model.cls.parameters()), "lr": 1e-3}]
groups.append({"params": list(model.backbone.embeddings.parameters()), "lr": 1e-4 * 0.9**25})
for i, layer in enumerate(model.backbone.model.layer):
    groups.append({"params": list(layer.parameters()), "lr": 1e-4 * 0.9 ** (24 - i)})
groups.append({"params": list(model.backbone.norm.parameters()), "lr": 1e-4})
opt = torch.optim.AdamW(groups, weight_decay=0.05, fused=True)
print("params", sum(p.numel() for p in model.parameters()))
report("dinov3_vit_l_segmenter_built_fp32")

model.train()
for step in range(5):
    x = torch.randn(8, 3, 512, 512, device="cuda")
    y = torch.randint(0, 150, (8, 512, 512), device="cuda")
    y[:, :16] = 255
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, ignore_index=255)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
report("fine_tune_bf16_autocast_512")

del opt, loss
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    x = torch.randn(4, 3, 768, 768, device="cuda")
    pred = model(x).argmax(1)
print("pred", tuple(pred.shape))
report("inference_mode_768")
