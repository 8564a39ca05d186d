"""A DINOv2-with-registers ViT-B/14 classifier from Dinov2WithRegistersConfig (768 wide, 12 layers,
4 register tokens, position embeddings for 518 x 518, drop path 0.1, 1,000 classes, SDPA) fine-tuned
at 224 x 224 (the position embeddings interpolated bicubically each forward) under bf16 autocast:
batches of 64, label-smoothed cross-entropy, fused AdamW over parameter groups with layer-wise lr
decay over 14 depths (decay 0.75, no weight decay on norms, biases, tokens), 3 steps; then the
model cast to fp16 for evaluation at the native 518 x 518 (1,369 patches + CLS + 4 registers), 2
batches of 16 under no_grad with output_hidden_states, the CLS token of each of the 13 hidden states
stacked for a linear probe; 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersForImageClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13002)
if SMALL:
    cfg = Dinov2WithRegistersConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=56,
        patch_size=14,
        num_labels=10,
    )
    B, RES, EB, ERES = 2, 28, 2, 56
else:
    cfg = Dinov2WithRegistersConfig(
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        image_size=518,
        patch_size=14,
        num_register_tokens=4,
        drop_path_rate=0.1,
        num_labels=1000,
    )
    B, RES, EB, ERES = 64, 224, 16, 518
cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"

model = Dinov2WithRegistersForImageClassification(cfg).to(device)
L = cfg.num_hidden_layers


def layer_id(name):
    if name.startswith("dinov2_with_registers.embeddings"):
        return 0
    if name.startswith("dinov2_with_registers.encoder.layer."):
        return int(name.split(".")[3]) + 1
    return L + 1


groups = {}
for name, p in model.named_parameters():
    lid = layer_id(name)
    no_wd = p.ndim == 1 or "token" in name or "position_embeddings" in name
    key = (lid, no_wd)
    if key not in groups:
        groups[key] = {
            "params": [],
            "lr": 5e-5 * 0.75 ** (L + 1 - lid),
            "weight_decay": 0.0 if no_wd else 0.05,
        }
    groups[key]["params"].append(p)
optimizer = torch.optim.AdamW(list(groups.values()), fused=True)
print(f"param groups {len(groups)}")

if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    x = torch.randn(B, 3, RES, RES, device=device)
    y = torch.randint(0, cfg.num_labels, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(pixel_values=x).logits
        loss = F.cross_entropy(logits.float(), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, logits, loss

del optimizer
model = model.half().eval()
feats = []
with torch.no_grad():
    for _ in range(2):
        x = torch.randn(EB, 3, ERES, ERES, device=device, dtype=torch.float16)
        out = model(pixel_values=x, output_hidden_states=True)
        feats.append(torch.stack([h[:, 0] for h in out.hidden_states], dim=1).float())
        del out, x
feats = torch.cat(feats)
if device == "cuda":
    print(
        f"eval feats {tuple(feats.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke feats {tuple(feats.shape)}")
