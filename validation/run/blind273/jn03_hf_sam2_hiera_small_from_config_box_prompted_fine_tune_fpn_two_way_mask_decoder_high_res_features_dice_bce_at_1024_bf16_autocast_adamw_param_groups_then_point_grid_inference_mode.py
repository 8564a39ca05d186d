"""SAM 2.1 (transformers 5.17's `Sam2Model`, the Hiera-S layout) built from config and fine-tuned on box
prompts the way MedSAM2-style projects do: the Hiera image encoder (stages of 1, 2, 11 and 2 blocks, d 96 to
768, windowed attention with global blocks 7, 10 and 13, window positional embeddings), the FPN neck of 256,
the prompt encoder and the two-way mask decoder with the stride-4/8 high-resolution features. fp32 weights
under bf16 autocast, all parameters trained with two AdamW parameter groups (the image encoder at a tenth of
the learning rate): 5 steps of 4 images of 1,024 x 1,024 with 8 boxes each, single-mask output
(`multimask_output=False`), the 256 x 256 low-resolution logits upsampled to 1,024 with `F.interpolate`,
sigmoid-BCE plus soft Dice against random binary masks plus an MSE on the predicted IoU; then under
`torch.inference_mode()` an automatic-mask-generation pass: `get_image_embeddings` for 2 images once, then a
32 x 32 grid of point prompts in 4 chunks of 256 points (3 masks each) on the cached embeddings. Seeded; no
value-dependent sizes. 3 phases."""

import torch
import torch.nn.functional as F
from transformers import Sam2Config, Sam2Model

torch.manual_seed(2733)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Sam2Config(
    vision_config=dict(
        backbone_config=dict(
            blocks_per_stage=[1, 2, 11, 2],
            global_attention_blocks=[7, 10, 13],
        ),
    ),
)
model = Sam2Model(cfg).cuda()
enc = [p for n, p in model.named_parameters() if n.startswith("vision_encoder.")]
rest = [p for n, p in model.named_parameters() if not n.startswith("vision_encoder.")]
print("params", sum(p.numel() for p in enc), sum(p.numel() for p in rest))
opt = torch.optim.AdamW([{"params": enc, "lr": 1e-5}, {"params": rest, "lr": 1e-4}], weight_decay=0.01)
report("sam2_built_fp32")

B, NB, S = 4, 8, 1024
model.train()
for step in range(5):
    pixels = torch.randn(B, 3, S, S, device="cuda")
    xy = torch.rand(B, NB, 2, device="cuda") * 700
    wh = 64 + torch.rand(B, NB, 2, device="cuda") * 256
    boxes = torch.cat([xy, xy + wh], dim=-1)
    target = (torch.rand(B, NB, 1, S, S, device="cuda") > 0.5).float()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(pixel_values=pixels, input_boxes=boxes, multimask_output=False)
    logits = F.interpolate(
        out.pred_masks.float().flatten(0, 1), size=(S, S), mode="bilinear", align_corners=False
    ).view(B, NB, 1, S, S)
    bce = F.binary_cross_entropy_with_logits(logits, target)
    prob = logits.sigmoid()
    inter = (prob * target).sum(dim=(-1, -2))
    dice = 1 - (2 * inter + 1) / (prob.sum(dim=(-1, -2)) + target.sum(dim=(-1, -2)) + 1)
    with torch.no_grad():
        hard = (logits > 0).float()
        iou = (hard * target).sum(dim=(-1, -2)) / ((hard + target).clamp(max=1).sum(dim=(-1, -2)) + 1e-6)
    loss = bce + dice.mean() + F.mse_loss(out.iou_scores.float(), iou)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 4))
report("box_prompt_fine_tune")

del opt, loss, out, logits, prob, target, pixels
model.eval()
g = (torch.arange(32, device="cuda") + 0.5) * (S / 32)
grid = torch.stack(torch.meshgrid(g, g, indexing="xy"), dim=-1).reshape(-1, 2)  # 1,024 points
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    images = torch.randn(2, 3, S, S, device="cuda")
    emb = model.get_image_embeddings(images)
    kept = 0
    for chunk in grid.split(256):
        pts = chunk[None, :, None, :].expand(2, -1, -1, -1)
        labels = torch.ones(2, chunk.shape[0], 1, dtype=torch.int64, device="cuda")
        out = model(image_embeddings=emb, input_points=pts, input_labels=labels, multimask_output=True)
        masks = F.interpolate(out.pred_masks.flatten(0, 1).float(), size=(S, S), mode="bilinear")
        kept += int(((out.iou_scores > 0.0).sum()).item())
        del masks
print("grid masks scored", kept)
report("point_grid_inference_mode")
