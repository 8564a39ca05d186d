"""Structured pruning of a timm ViT-S/16 (vit_small_patch16_224, pretrained=False: 12 blocks, 384
wide, 6 heads, MLP 1,536, 1,000 classes) with torch.nn.utils.prune, then the pruned channels cut out
for real, as the "prune then shrink" recipes (Torch-Pruning's L2 magnitude criterion, the PyTorch
pruning tutorial's ln_structured) write it: every block's mlp.fc1 pruned by
`prune.ln_structured(amount=0.25, n=2, dim=0)` (whole output rows) and mlp.fc2 by the same on dim=1
(the matching input columns, a second pass adding to a PruningContainer after an l1_unstructured
0.1 mask), attn.proj by `prune.random_structured(amount=0.125, dim=1)`; fine-tuned with the masks
in place (fp32 weights under bf16 autocast, fused AdamW lr 5e-4, label-smoothed cross-entropy 0.1,
batches of 64 x 3 x 224 x 224), then `prune.remove` and each MLP rebuilt smaller: the rows of fc1
kept by `torch.topk` of their L2 norms (1,152 of 1,536), fc1's rows and bias and fc2's columns
index_select-ed into new Linear layers, a fresh fused AdamW, fine-tuned again; evaluation under
inference_mode in bf16 autocast over 2 batches of 256. Phases: the model built, the first pruned
step, two more, the shrink and two steps of the smaller model, the evaluation; 5 phases."""

import os

import timm
import torch
import torch.nn as nn
import torch.nn.utils.prune as prune

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16903)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = "cuda" if device == "cuda" else "cpu"
if SMALL:
    KW = dict(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3, num_classes=10)
    B, RES, NCLS, STEPS, EVAL_B = 4, 32, 10, 3, 8
    model = timm.create_model("vit_small_patch16_224", pretrained=False, **KW)
else:
    B, RES, NCLS, STEPS, EVAL_B = 64, 224, 1000, 3, 256
    model = timm.create_model("vit_small_patch16_224", pretrained=False)
model = model.to(device)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
gen = torch.Generator().manual_seed(16903)
print(f"params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def images(n):
    x = torch.randn(n, 3, RES, RES, generator=gen)
    y = torch.randint(0, NCLS, (n,), generator=gen)
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


for blk in model.blocks:
    prune.ln_structured(blk.mlp.fc1, "weight", amount=0.25, n=2, dim=0)
    prune.l1_unstructured(blk.mlp.fc2, "weight", amount=0.1)
    prune.ln_structured(blk.mlp.fc2, "weight", amount=0.25, n=2, dim=1)
    prune.random_structured(blk.attn.proj, "weight", amount=0.125, dim=1)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05, fused=device == "cuda")


def train_step():
    x, y = images(B)
    with torch.autocast(amp, dtype=torch.bfloat16):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


model.train()
for step in range(STEPS):
    loss = train_step()
    print(f"masked step {step} loss {loss:.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

for blk in model.blocks:
    prune.remove(blk.mlp.fc1, "weight")
    prune.remove(blk.mlp.fc2, "weight")
    prune.remove(blk.attn.proj, "weight")
del optimizer
with torch.no_grad():
    for blk in model.blocks:
        fc1, fc2 = blk.mlp.fc1, blk.mlp.fc2
        keep = fc1.out_features - round(0.25 * fc1.out_features)
        idx = torch.topk(fc1.weight.norm(p=2, dim=1), keep).indices.sort().values
        new_fc1 = nn.Linear(fc1.in_features, keep).to(device)
        new_fc2 = nn.Linear(keep, fc2.out_features).to(device)
        new_fc1.weight.copy_(fc1.weight.index_select(0, idx))
        new_fc1.bias.copy_(fc1.bias.index_select(0, idx))
        new_fc2.weight.copy_(fc2.weight.index_select(1, idx))
        new_fc2.bias.copy_(fc2.bias)
        blk.mlp.fc1, blk.mlp.fc2 = new_fc1, new_fc2
    del fc1, fc2, new_fc1, new_fc2, idx
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.05, fused=device == "cuda")
print(f"shrunk params {sum(p.numel() for p in model.parameters())}")
for step in range(2):
    loss = train_step()
    print(f"shrunk step {step} loss {loss:.4f}")
if device == "cuda":
    print(f"shrink peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.inference_mode(), torch.autocast(amp, dtype=torch.bfloat16):
    for _ in range(2):
        x, y = images(EVAL_B)
        correct += (model(x).argmax(-1) == y).sum().item()
print(f"eval accuracy {correct / (2 * EVAL_B):.4f}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
