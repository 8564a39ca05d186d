"""MaskFormer semantic segmentation training with an HF ResNet-50 backbone the way users write it when scipy
is absent: MaskFormerForInstanceSegmentation builds MaskFormerLoss (scipy's Hungarian matcher,
`requires_backends`) in its constructor, so the bare MaskFormerModel from `MaskFormerConfig(num_labels=150,
backbone_config=ResNetConfig(out_features=stage1-4))` (random init, FPN pixel decoder of 256, a 6-layer DETR
decoder, 100 queries) and the heads MaskFormerForInstanceSegmentation adds, written by hand: an nn.Linear
class head (151 with no-object) and a 3-layer MLP mask embedder whose output is multiplied with the pixel
decoder's per-pixel embeddings. MaskFormer's loss by hand: a greedy matcher on a class + dice cost,
cross-entropy over every query (no-object 0.1), and on the matched masks upsampled to the full image size a
sigmoid focal loss (weight 20) and dice (weight 1).

Phases: 0 model and SGD (momentum 0.9, weight decay 1e-4, backbone lr x 0.1) with a poly LambdaLR; 1 three
steps at batch 8 on 512 x 512 images with 6 segments each under fp16 autocast with
torch.amp.GradScaler(init_scale=1024) (unscale_, clip_grad_norm_ 0.01, step, update); 2 eval under no_grad and
fp16 autocast, two batches of 4 at 640 x 853 with MaskFormerImageProcessor.post_process_semantic_segmentation;
3 the model cast to bf16 in channels_last, inference_mode over two batches of 8 at 512 x 512 with semantic
post-processing. Seeded; no sizes depend on values."""

import os
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torchvision.ops import sigmoid_focal_loss
from transformers import MaskFormerConfig, MaskFormerImageProcessor, MaskFormerModel, ResNetConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3592)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    B1, SIZE, SEGS, B2, H2, W2, B3 = 1, 128, 2, 1, 128, 160, 2
else:
    B1, SIZE, SEGS, B2, H2, W2, B3 = 8, 512, 6, 4, 640, 853, 8
NUM_LABELS = 150


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


resnet = ResNetConfig(out_features=["stage1", "stage2", "stage3", "stage4"])
if SMALL:
    resnet = ResNetConfig(
        embedding_size=16,
        hidden_sizes=[32, 64, 128, 256],
        depths=[1, 1, 1, 1],
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
config = MaskFormerConfig(backbone_config=resnet, num_labels=NUM_LABELS)
if SMALL:
    config.decoder_config.num_queries = 10
    config.decoder_config.decoder_layers = 2


class MaskFormerWithHeads(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = MaskFormerModel(config)
        hidden = config.decoder_config.hidden_size
        self.class_predictor = torch.nn.Linear(hidden, config.num_labels + 1)
        self.mask_embedder = torch.nn.Sequential(
            torch.nn.Linear(hidden, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, config.mask_feature_size),
        )

    def forward(self, pixel_values):
        out = self.model(pixel_values=pixel_values)
        queries = out.transformer_decoder_last_hidden_state
        classes = self.class_predictor(queries)
        masks = torch.einsum(
            "bqc,bchw->bqhw", self.mask_embedder(queries), out.pixel_decoder_last_hidden_state
        )
        return classes, masks


def greedy_match(cost):
    """Greedy stand-in for linear_sum_assignment: take the cheapest (query, segment) pair, strike both."""
    cost = cost.float().cpu().clone()
    rows, cols = [], []
    for _ in range(cost.shape[1]):
        q, g = divmod(int(cost.argmin()), cost.shape[1])
        rows.append(q)
        cols.append(g)
        cost[q, :] = float("inf")
        cost[:, g] = float("inf")
    return torch.tensor(rows, device=device), torch.tensor(cols, device=device)


def maskformer_loss(class_logits, mask_logits, labels, masks):
    """masks: (B, G, H, W) at full image size; mask_logits at the pixel decoder's quarter size."""
    B, Q = class_logits.shape[:2]
    target_classes = torch.full((B, Q), NUM_LABELS, dtype=torch.long, device=device)
    matched, targets = [], []
    with torch.no_grad():
        prob = class_logits.float().softmax(-1)
        small = F.interpolate(masks, size=mask_logits.shape[-2:], mode="nearest")
    for b in range(B):
        with torch.no_grad():
            m = mask_logits[b].float().sigmoid().flatten(1)
            t = small[b].flatten(1)
            dice = 1 - (2 * m @ t.T + 1) / (m.sum(1, keepdim=True) + t.sum(1)[None] + 1)
            cost = -prob[b][:, labels[b]] + dice
        q, g = greedy_match(cost)
        target_classes[b, q] = labels[b][g]
        matched.append(mask_logits[b][q])
        targets.append(masks[b][g])
    weight = torch.ones(NUM_LABELS + 1, device=device)
    weight[-1] = 0.1
    loss_ce = F.cross_entropy(class_logits.float().transpose(1, 2), target_classes, weight=weight)
    pred = F.interpolate(torch.cat(matched)[:, None].float(), size=masks.shape[-2:], mode="bilinear")
    pred = pred[:, 0].flatten(1)
    gt = torch.cat(targets).flatten(1)
    focal = sigmoid_focal_loss(pred, gt, alpha=0.25, gamma=2.0, reduction="mean")
    prob_m = pred.sigmoid()
    dice = (1 - (2 * (prob_m * gt).sum(1) + 1) / (prob_m.sum(1) + gt.sum(1) + 1)).mean()
    return loss_ce + 20.0 * focal + 1.0 * dice


model = MaskFormerWithHeads(config).to(device)
backbone = [p for n, p in model.named_parameters() if "pixel_level_module.encoder." in n]
backbone_ids = {id(p) for p in backbone}
rest = [p for p in model.parameters() if id(p) not in backbone_ids]
opt = torch.optim.SGD(
    [{"params": backbone, "lr": 1e-3}, {"params": rest, "lr": 1e-2}], momentum=0.9, weight_decay=1e-4
)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: (1 - it / 160000) ** 0.9)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**10, enabled=cuda)
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,}, "
    f"backbone {sum(p.numel() for p in backbone):,}"
)
report("phase0 maskformer r50 + heads + sgd")

model.train()
for step in range(3):
    pixels = torch.randn(B1, 3, SIZE, SIZE, device=device)
    labels = torch.randint(0, NUM_LABELS, (B1, SEGS), device=device)
    masks = (torch.rand(B1, SEGS, SIZE, SIZE, device=device) > 0.8).float()
    with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=cuda):
        classes, mask_logits = model(pixels)
    loss = maskformer_loss(classes, mask_logits, labels, masks)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    scaler.step(opt)
    scaler.update()
    sched.step()
    print(f"train step {step} loss {loss.item():.4f} scale {scaler.get_scale() if cuda else 1.0}")
del classes, mask_logits, loss
report(f"phase1 three fp16 autocast gradscaler steps at batch {B1} x {SIZE}^2")

processor = MaskFormerImageProcessor()
model.eval()
with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.float16, enabled=cuda):
    for _ in range(2):
        classes, mask_logits = model(torch.randn(B2, 3, H2, W2, device=device))
        out = SimpleNamespace(class_queries_logits=classes, masks_queries_logits=mask_logits)
        seg = processor.post_process_semantic_segmentation(out, target_sizes=[(H2, W2)] * B2)
        print(f"semantic maps {len(seg)} x {tuple(seg[0].shape)}")
        del classes, mask_logits, out, seg
report(f"phase2 no_grad fp16 autocast eval + semantic post-processing at batch {B2} x {H2}x{W2}")

dtype = torch.bfloat16 if cuda else torch.float32
model.to(dtype=dtype, memory_format=torch.channels_last)
with torch.inference_mode():
    for _ in range(2):
        pixels = torch.randn(B3, 3, SIZE, SIZE, device=device, dtype=dtype).contiguous(
            memory_format=torch.channels_last
        )
        classes, mask_logits = model(pixels)
        out = SimpleNamespace(class_queries_logits=classes, masks_queries_logits=mask_logits)
        seg = processor.post_process_semantic_segmentation(out, target_sizes=[(SIZE, SIZE)] * B3)
        print(f"bf16 channels_last maps {len(seg)} x {tuple(seg[0].shape)}")
        del classes, mask_logits, out, seg
report(f"phase3 bf16 channels_last inference_mode at batch {B3} x {SIZE}^2")
