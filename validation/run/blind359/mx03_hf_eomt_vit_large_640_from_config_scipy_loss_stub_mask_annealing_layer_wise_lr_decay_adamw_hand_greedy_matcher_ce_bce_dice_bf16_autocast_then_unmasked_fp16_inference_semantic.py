"""EoMT (encoder-only mask transformer) fine-tuning and inference the way users write it when scipy is absent:
EomtForUniversalSegmentation builds EomtLoss (scipy's Hungarian matcher, `requires_backends`) in its
constructor, so the script swaps modeling_eomt.EomtLoss for a stub module before building the model (the loss
is only called when labels are given) and writes the set loss by hand. An EomtForUniversalSegmentation from
`EomtConfig(num_labels=133)` (ViT-L: 1024 x 24 layers, patch 16 at 640 x 640, 4 register tokens, layer scale;
200 queries joined before the last 4 blocks, the masked attention of those blocks driven by the intermediate
mask predictions; random init). Mask annealing as the EoMT recipe does it: `attn_mask_probs` (one per
block) lowered during training, each query's mask dropped at random with probability 1 - p, and set to 0
for inference, which then skips the intermediate predictions and masks. Layer-wise lr decay 0.8 over the ViT
blocks (one AdamW group per block). The loss on the final predictions: a greedy matcher on a class + dice
cost, cross-entropy over every query (no-object 0.1), sigmoid BCE and dice on the matched masks at the
mask head's 160 x 160.

Phases: 0 model and AdamW (26 groups: head 1e-4, blocks 1e-4 x 0.8^(24 - i), embeddings the lowest; weight
decay 0.05); 1 three steps at batch 2 on 640 x 640 images with 10 segments each under bf16 autocast with
attn_mask_probs (1.0, 1.0, 0.8, 0.5), clip_grad_norm_ 0.01; 2 attn_mask_probs set to 0, fp16 autocast under
inference_mode, two batches of 2 with the semantic map computed as EoMT's post-processing does (mask logits
upsampled to 640, class softmax without no-object, einsum, argmax); 3 the model cast to fp16 (`.half()`),
inference_mode over a batch of 4. Seeded; no sizes depend on values."""

import os

import torch
import torch.nn.functional as F
import transformers.models.eomt.modeling_eomt as modeling_eomt
from transformers import EomtConfig, EomtForUniversalSegmentation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3593)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = EomtConfig(
        num_labels=133,
        hidden_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        image_size=128,
        num_queries=20,
    )
    B1, SEGS, B2, B3 = 1, 3, 2, 2
else:
    config = EomtConfig(num_labels=133)
    B1, SEGS, B2, B3 = 2, 10, 2, 4
NUM_LABELS = config.num_labels
SIZE = config.image_size


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


class NoScipyLoss(torch.nn.Module):
    """Stands in for EomtLoss, whose constructor requires scipy; never called (no labels are passed). It keeps
    the attributes and the no-object weight buffer that EomtPreTrainedModel._init_weights fills in."""

    def __init__(self, config, weight_dict):
        super().__init__()
        self.num_labels = config.num_labels
        self.eos_coef = config.no_object_weight
        self.empty_weight = torch.nn.Buffer(torch.ones(self.num_labels + 1))


modeling_eomt.EomtLoss = NoScipyLoss


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


def dice_loss(logits, target):
    prob = logits.sigmoid().flatten(1)
    target = target.flatten(1)
    return (1 - (2 * (prob * target).sum(1) + 1) / (prob.sum(1) + target.sum(1) + 1)).mean()


def set_loss(class_logits, mask_logits, labels, masks):
    B, Q = class_logits.shape[:2]
    target_classes = torch.full((B, Q), NUM_LABELS, dtype=torch.long, device=device)
    matched_logits, matched_masks = [], []
    with torch.no_grad():
        prob = class_logits.float().softmax(-1)
    for b in range(B):
        with torch.no_grad():
            m = mask_logits[b].float().sigmoid().flatten(1)
            t = masks[b].flatten(1)
            dice = 1 - (2 * m @ t.T + 1) / (m.sum(1, keepdim=True) + t.sum(1)[None] + 1)
            cost = -prob[b][:, labels[b]] + dice
        q, g = greedy_match(cost)
        target_classes[b, q] = labels[b][g]
        matched_logits.append(mask_logits[b][q])
        matched_masks.append(masks[b][g])
    weight = torch.ones(NUM_LABELS + 1, device=device)
    weight[-1] = 0.1
    loss_ce = F.cross_entropy(class_logits.float().transpose(1, 2), target_classes, weight=weight)
    pred = torch.cat(matched_logits).float()
    gt = torch.cat(matched_masks)
    return 2.0 * loss_ce + 5.0 * F.binary_cross_entropy_with_logits(pred, gt) + 5.0 * dice_loss(pred, gt)


def semantic_maps(out):
    masks = F.interpolate(out.masks_queries_logits, size=(SIZE, SIZE), mode="bilinear")
    classes = out.class_queries_logits.softmax(-1)[..., :-1]
    return torch.einsum("bqc,bqhw->bchw", classes, masks.sigmoid()).argmax(1)


model = EomtForUniversalSegmentation(config).to(device)
L = config.num_hidden_layers
groups = [{"params": list(model.embeddings.parameters()), "lr": 1e-4 * 0.8 ** (L + 1)}]
for i, layer in enumerate(model.layers):
    groups.append({"params": list(layer.parameters()), "lr": 1e-4 * 0.8 ** (L - i)})
seen = {id(p) for g in groups for p in g["params"]}
groups.append({"params": [p for p in model.parameters() if id(p) not in seen], "lr": 1e-4})
opt = torch.optim.AdamW(groups, weight_decay=0.05)
print(f"parameters {sum(p.numel() for p in model.parameters()):,}, param groups {len(groups)}")
report("phase0 eomt vit-l + adamw with layer-wise lr decay")

model.train()
with torch.no_grad():
    model.attn_mask_probs.copy_(torch.tensor([1.0, 1.0, 0.8, 0.5]))
mask_size = SIZE // 4
for step in range(3):
    pixels = torch.randn(B1, 3, SIZE, SIZE, device=device)
    labels = torch.randint(0, NUM_LABELS, (B1, SEGS), device=device)
    masks = (torch.rand(B1, SEGS, mask_size, mask_size, device=device) > 0.8).float()
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model(pixel_values=pixels)
    loss = set_loss(out.class_queries_logits, out.masks_queries_logits, labels, masks)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    opt.step()
    print(f"train step {step} loss {loss.item():.4f} masks {tuple(out.masks_queries_logits.shape)}")
del out, loss
report(f"phase1 three annealed-mask steps at batch {B1} x {SIZE}^2, bf16 autocast")

model.eval()
with torch.no_grad():
    model.attn_mask_probs.zero_()
with torch.inference_mode(), torch.autocast(device_type="cuda", dtype=torch.float16, enabled=cuda):
    for _ in range(2):
        out = model(pixel_values=torch.randn(B2, 3, SIZE, SIZE, device=device))
        seg = semantic_maps(out)
        print(f"semantic maps {tuple(seg.shape)}")
        del out, seg
report(f"phase2 unmasked inference_mode fp16 autocast, 2 batches of {B2}")

model.half()
if not cuda:
    model.float()
with torch.inference_mode():
    out = model(pixel_values=torch.randn(B3, 3, SIZE, SIZE, device=device, dtype=model.dtype))
    seg = semantic_maps(out)
    print(f"fp16 semantic maps {tuple(seg.shape)}")
    del out, seg
report(f"phase3 fp16 .half() inference_mode at batch {B3}")
