"""Text-supervised semantic grouping with HF GroupViT (model_type "groupvit"): GroupViTModel from
its default config (a 12-layer 384-wide vision transformer in three stages of 6/3/3 layers whose 64
then 8 learned group tokens absorb the 196 patch tokens through straight-through hard Gumbel-softmax
assignment; a 12-layer 256-wide text transformer; 256-d projections through 4,096-wide MLPs)
trained with its image-text contrastive loss on 96 images of 224 x 224 with 77-token captions, bf16
autocast, fused AdamW with CosineAnnealingWarmRestarts, 3 steps. Then zero-shot classification under
inference_mode: 80 prompt embeddings against 128 images, top-5; and open-vocabulary segmentation
(output_segmentation: the two grouping stages' attentions composed into per-pixel group maps, group
embeddings scored against 20 prompts), the masks upsampled bilinearly to the input size and argmaxed,
for 16 images.

Phases: 0 model built; 1 first step; 2 two more steps; 3 zero-shot classification; 4 segmentation."""

import os

import torch
import torch.nn.functional as F
from transformers import GroupViTConfig, GroupViTModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3234)
if SMALL:
    config = GroupViTConfig(
        text_config=dict(vocab_size=300, bos_token_id=297, eos_token_id=298, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4),
        vision_config=dict(hidden_size=32, intermediate_size=64, depths=[1, 1, 1], num_hidden_layers=3,
                           num_group_tokens=[8, 4, 0], num_output_groups=[8, 4, 4], num_attention_heads=4,
                           image_size=32, patch_size=8),
        projection_dim=16, projection_intermediate_dim=32,
    )
    B, L, N_CLASSES, B_ZS, N_SEG, B_SEG = 4, 16, 5, 4, 3, 2
else:
    config = GroupViTConfig()
    B, L, N_CLASSES, B_ZS, N_SEG, B_SEG = 96, 77, 80, 128, 20, 16
SIZE = config.vision_config.image_size
EOS = config.text_config.eos_token_id
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def captions(n):
    """CLIP-style token ids: BOS, words, EOS (the pooled position), then padding; with their mask."""
    ids = torch.zeros(n, L, dtype=torch.long)
    mask = torch.zeros(n, L, dtype=torch.long)
    for i in range(n):
        used = int(torch.randint(5, L + 1, ()).item())
        ids[i, 0] = config.text_config.bos_token_id
        ids[i, 1:used - 1] = torch.randint(1, EOS - 10, (used - 2,))
        ids[i, used - 1] = EOS
        mask[i, :used] = 1
    return ids.to(device), mask.to(device)


def images(n):
    return torch.randn(n, 3, SIZE, SIZE).to(device)


model = GroupViTModel(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05, fused=device == "cuda")
schedule = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=2, T_mult=2)
report("built")

model.train()
for step in range(3):
    ids, mask = captions(B)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=mask, pixel_values=images(B), return_loss=True)
    out.loss.backward()
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f} lr {schedule.get_last_lr()[0]:.2e}")
    del out, ids, mask
    if step == 0:
        report("step0")
report("steps1-2")

model.eval()
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    ids, mask = captions(N_CLASSES)
    text = F.normalize(model.get_text_features(input_ids=ids, attention_mask=mask).pooler_output.float(), dim=-1)
    image = F.normalize(model.get_image_features(pixel_values=images(B_ZS)).pooler_output.float(), dim=-1)
    probs = (100 * image @ text.T).softmax(-1)
    top5 = probs.topk(5, dim=-1).indices
print(f"zero-shot top-1 classes {top5[:, 0].bincount(minlength=N_CLASSES)[:8].tolist()}")
del text, image, probs, top5
report("zero-shot")

with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    ids, mask = captions(N_SEG)
    out = model(input_ids=ids, attention_mask=mask, pixel_values=images(B_SEG), output_segmentation=True)
    seg = F.interpolate(out.segmentation_logits.float(), size=(SIZE, SIZE), mode="bilinear", align_corners=False)
    masks = seg.argmax(1)
    coverage = torch.stack([(masks == c).float().mean() for c in range(N_SEG)])
print(f"segmentation coverage {[round(v, 3) for v in coverage[:6].tolist()]}")
report("segmentation")
