"""FlexiViT (Beyer et al. 2023) training as its paper describes it, on timm 1.0.29's `flexivit_small`
(384 wide, 12 blocks, no_embed_class) built with underlying 32 x 32 patch-embedding weights, 240 x 240
images, `dynamic_img_size=True` and 100 classes. Every step draws a patch size from {8, 10, 12, 15, 16, 20,
24, 30, 40, 48} (seeded) and the patch-embedding kernel is PI-resized to it inside the graph by timm's
`PatchEmbedResamplerFixedOrigSize` (a pseudo-inverse of the bicubic resize matrix, `torch.linalg.pinv` on
the GPU, cached per size), applied with `F.conv2d(stride=p)`; the 7 x 7 position embedding is resampled to
the token grid by the model's own `_pos_embed` (dynamic_img_size), then the blocks, the final norm and the
head. bf16 autocast, label smoothing 0.1, gradient clipping at 1.0, timm's `madgradw` (decoupled weight
decay 0.05) via `create_optimizer_v2`, batch 64.

Phases: 0 model, resampler and optimizer built; 1 first step; 2 five more steps (other patch sizes, new
pinv matrices cached); 3 optimizer dropped, `set_input_size(img_size=384, patch_size=24)` (the kernel and
position embedding resampled once into new parameters), then `forward_intermediates` of blocks 3, 7 and
11 as NCHW maps at batch 32 under inference_mode + bf16, fused into a 96 x 96 dense feature map; 4 the model
cast to fp16, plain forwards at 288, 384 and 480 (dynamic image size, patch 24) at batch 64."""

import timm
import torch
import torch.nn.functional as F
from timm.layers.patch_embed import PatchEmbedResamplerFixedOrigSize
from timm.optim import create_optimizer_v2

torch.manual_seed(3003)
dev = "cuda"
B, IMG, STEPS = 64, 240, 6
PATCH_SIZES = [8, 10, 12, 15, 16, 20, 24, 30, 40, 48]


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model(
    "flexivit_small",
    pretrained=False,
    patch_size=32,
    img_size=IMG,
    dynamic_img_size=True,
    num_classes=100,
    drop_path_rate=0.1,
).to(dev)
resampler = PatchEmbedResamplerFixedOrigSize((32, 32), device=dev)
optimizer = create_optimizer_v2(model, "madgradw", lr=1e-3, weight_decay=0.05)
report("flexivit_small_build_madgradw")


def flexi_forward(images, p):
    pe = model.patch_embed
    weight = resampler(pe.proj.weight, [p, p])
    x = F.conv2d(images, weight, pe.proj.bias, stride=p).permute(0, 2, 3, 1)
    x = pe.norm(x)
    x = model._pos_embed(x)
    x = model.patch_drop(x)
    x = model.norm_pre(x)
    x = model.blocks(x)
    x = model.norm(x)
    return model.forward_head(x)


draws = torch.randint(0, len(PATCH_SIZES), (STEPS,)).tolist()
model.train()
for step, i in enumerate(draws):
    p = PATCH_SIZES[i]
    images = torch.randn(B, 3, IMG, IMG, device=dev)
    labels = torch.randint(0, 100, (B,), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(flexi_forward(images, p), labels, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    print("step", step, "patch", p, "loss", round(loss.item(), 3))
    if step == 0:
        report("flexi_first_step")
report("flexi_five_more_steps")

del optimizer, images, labels, loss
model.eval()
model.set_input_size(img_size=(384, 384), patch_size=(24, 24))
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    x = torch.randn(32, 3, 384, 384, device=dev)
    maps = model.forward_intermediates(x, indices=[3, 7, 11], output_fmt="NCHW", intermediates_only=True)
    dense = torch.cat(
        [F.interpolate(m, size=(96, 96), mode="bilinear", align_corners=False) for m in maps], 1
    )
print("dense", tuple(dense.shape))
report("set_input_size_384_p24_forward_intermediates")

del x, maps, dense
model.half()
with torch.inference_mode():
    for res in (288, 384, 480):
        logits = model(torch.randn(64, 3, res, res, device=dev, dtype=torch.float16))
        print(res, tuple(logits.shape))
report("half_multi_resolution_eval")
