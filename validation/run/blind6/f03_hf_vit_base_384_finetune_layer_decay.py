"""HF ViTForImageClassification from a ViT-B/16 ViTConfig at 384 px (577 tokens, 1000 classes; 86.9M),
fine-tuning recipe: fp32 weights under bf16 autocast, mixup soft targets (CE with probabilities),
layer-wise learning-rate decay as one AdamW param group per encoder layer (foreach default),
clip_grad_norm_, batch 96, 3 steps; then a `no_grad` eval at batch 256 with softmax top-5 to the host."""

import os
import re

import torch
import torch.nn.functional as F
from transformers import ViTConfig, ViTForImageClassification

D, LAYERS, HEADS, IMG, PATCH, CLASSES, B = (
    (32, 2, 2, 32, 16, 10, 2) if os.environ.get("SMOKE") else (768, 12, 12, 384, 16, 1000, 96)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(603)

config = ViTConfig(
    hidden_size=D,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=4 * D,
    image_size=IMG,
    patch_size=PATCH,
    num_labels=CLASSES,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
model = ViTForImageClassification(config).to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")

groups = {}
for name, p in model.named_parameters():
    match = re.search(r"\.layers?\.(\d+)\.", name)
    if match:
        depth = int(match.group(1)) + 1
    elif "embeddings" in name:
        depth = 0
    else:
        depth = LAYERS + 1
    groups.setdefault(depth, []).append(p)
optimizer = torch.optim.AdamW(
    [{"params": ps, "lr": 1e-3 * 0.75 ** (LAYERS + 1 - d)} for d, ps in sorted(groups.items())],
    weight_decay=0.05,
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} groups {len(optimizer.param_groups)}")
    torch.cuda.reset_peak_memory_stats()

amp = "cuda" if device == "cuda" else "cpu"
model.train()
for step in range(3):
    images = torch.randn(B, 3, IMG, IMG, device=device)
    labels = torch.randint(0, CLASSES, (B,), device=device)
    lam = 0.7
    images = lam * images + (1 - lam) * images.flip(0)
    onehot = F.one_hot(labels, CLASSES).float()
    target = lam * onehot + (1 - lam) * onehot.flip(0)
    with torch.autocast(amp, dtype=torch.bfloat16):
        logits = model(pixel_values=images).logits
    loss = F.cross_entropy(logits.float(), target)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast(amp, dtype=torch.bfloat16):
    logits = model(
        pixel_values=torch.randn(256 if device == "cuda" else 4, 3, IMG, IMG, device=device)
    ).logits
    top5 = logits.float().softmax(-1).topk(5, dim=-1).indices.cpu()
print(f"eval top5 {tuple(top5.shape)}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
