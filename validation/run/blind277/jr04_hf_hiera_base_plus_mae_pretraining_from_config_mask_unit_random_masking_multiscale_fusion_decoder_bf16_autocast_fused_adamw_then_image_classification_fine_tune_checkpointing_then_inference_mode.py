"""Hiera the way its MAE recipe pre-trains and then fine-tunes it (transformers 5.17's `HieraForPreTraining`
and `HieraForImageClassification` from config, the Hiera-B+ layout: embed 112, stages of 2/3/16/3 blocks with
2/4/8/16 heads, mask-unit attention in the first two stages, 3 query-pooling stages; the 7 x 7 stride-4 patch
convolution at 224 x 224). MAE pre-training: 60 % of the 8 x 8 mask units dropped by `random_masking` (device
`torch.rand` noise argsorted, the kept-unit mask gathered back; the masked convolution zeroes the dropped
pixels), the multi-scale fusion heads, an 8 x 512 decoder over the full 56 x 56 / 8 grid, the normalised-pixel
MSE over the masked units' patches (`label[bool_masked_pos]`); fp32 weights under bf16 autocast, fused AdamW,
6 steps of 128 images. Then an image classifier (1,000 classes) built from the same config with drop path 0.2,
the pre-trained encoder's weights loaded (`strict=False`), fine-tuned with non-reentrant gradient
checkpointing for 4 steps of 96 images (label smoothing 0.1) under bf16 autocast with a fresh AdamW; the
pre-training model and its optimizer deleted before; then batch 256 under inference_mode and autocast. Seeded,
no value-dependent sizes (the mask keeps exactly 40 % of the units a row). 4 phases."""

import torch
import torch.nn.functional as F
from transformers import HieraConfig, HieraForImageClassification, HieraForPreTraining

torch.manual_seed(2774)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = HieraConfig(
    embed_dim=112,
    image_size=[224, 224],
    depths=[2, 3, 16, 3],
    num_heads=[2, 4, 8, 16],
    masked_unit_size=[8, 8],
    masked_unit_attention=[True, True, False, False],
    decoder_hidden_size=512,
    decoder_depth=8,
    decoder_num_heads=16,
    mask_ratio=0.6,
    normalize_pixel_loss=True,
    num_labels=1000,
)
mae = HieraForPreTraining(cfg).cuda()
print("mae params", sum(p.numel() for p in mae.parameters()))
opt = torch.optim.AdamW(mae.parameters(), lr=1.5e-4, betas=(0.9, 0.95), weight_decay=0.05, fused=True)
report("hiera_mae_built_fp32")

mae.train()
for step in range(6):
    images = torch.randn(128, 3, 224, 224, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = mae(pixel_values=images)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(out.loss.item(), 4), int(out.bool_masked_pos.sum()))
encoder_state = {k: v.detach().clone() for k, v in mae.hiera.state_dict().items()}
del out, opt, mae
report("mae_pretraining_bf16_autocast")

cfg.drop_path_rate = 0.2
clf = HieraForImageClassification(cfg).cuda()
missing, unexpected = clf.hiera.load_state_dict(encoder_state, strict=False)
print("missing", len(missing), "unexpected", len(unexpected))
del encoder_state
clf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.AdamW(clf.parameters(), lr=2e-4, weight_decay=0.05, fused=True)
clf.train()
for step in range(4):
    images = torch.randn(96, 3, 224, 224, device="cuda")
    labels = torch.randint(0, 1000, (96,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = clf(pixel_values=images).logits
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=0.1)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("ft", step, round(loss.item(), 4))
del loss, logits
report("classification_fine_tune_checkpointing")

clf.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    images = torch.randn(256, 3, 224, 224, device="cuda")
    top5 = clf(pixel_values=images).logits.float().topk(5, dim=-1).indices
print("top5", tuple(top5.shape))
report("inference_mode_256")
