"""Document image classification after Li et al. 2022 ("DiT: Self-supervised Pre-training for Document
Image Transformer", microsoft/unilm's dit) with transformers' BEiT classes from configs, no downloads:
DiT-base for RVL-CDIP's 16 classes (BeitForImageClassification: 224 x 224 pages, patch 16, 768, 12
layers, absolute position embeddings, layer scale 0.1, drop path 0.1, mean pooling), fine-tuned under
bf16 autocast with AdamW (lr 5e-4 top, layer-wise lr decay 0.75 by per-layer parameter groups as DiT's
fine-tuning script builds them, no decay on norms, biases and the position embedding, label smoothing
0.1), batch 64, the first step its own phase, then 3 steps; evaluation of 3 batches of 256 under
inference_mode with bf16 autocast (top-1 accuracy); DiT's masked image modeling pre-training
(BeitForMaskedImageModeling with a shared relative position bias, 8,192 visual tokens, 75 of 196 patches
masked per image by rand/argsort on the host as BEiT's data loader masks, cross-entropy over the masked
positions' visual token ids selected by the boolean mask) in fp32 with AdamW (lr 1.5e-3, betas
0.9/0.999), 2 steps at batch 32; then a ViT-base classifier from ViTConfig at 384 x 384 (577 tokens,
SDPA), cast to float16 by `half()` and evaluated under no_grad at batch 128; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import (
    BeitConfig,
    BeitForImageClassification,
    BeitForMaskedImageModeling,
    ViTConfig,
    ViTForImageClassification,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18006)
gen = torch.Generator().manual_seed(18006)
if SMALL:
    H, L, HEADS, IMG, B, STEPS, EVAL_B, EVAL_N, MIM_B, VIT_IMG, VIT_B, VOCAB = (
        32,
        2,
        2,
        32,
        2,
        2,
        2,
        1,
        2,
        32,
        2,
        64,
    )
else:
    H, L, HEADS, IMG, B, STEPS, EVAL_B, EVAL_N, MIM_B, VIT_IMG, VIT_B, VOCAB = (
        768,
        12,
        12,
        224,
        64,
        4,
        256,
        3,
        32,
        384,
        128,
        8192,
    )
NUM_CLASSES = 16
device = "cuda" if torch.cuda.is_available() else "cpu"

cfg = BeitConfig(
    hidden_size=H,
    num_hidden_layers=L,
    num_attention_heads=HEADS,
    intermediate_size=4 * H,
    image_size=IMG,
    patch_size=16,
    use_absolute_position_embeddings=True,
    use_relative_position_bias=False,
    use_shared_relative_position_bias=False,
    use_mean_pooling=True,
    layer_scale_init_value=0.1,
    drop_path_rate=0.1,
    num_labels=NUM_CLASSES,
)
model = BeitForImageClassification(cfg).to(device)
print(f"dit params {sum(p.numel() for p in model.parameters())}")


def layer_id(name):
    if name.startswith("beit.embeddings"):
        return 0
    if name.startswith("beit.encoder.layer."):
        return int(name.split(".")[3]) + 1
    return L + 1


groups = {}
for name, p in model.named_parameters():
    no_decay = p.ndim == 1 or name.endswith(".bias") or "position_embeddings" in name or "cls_token" in name
    lid = layer_id(name)
    key = (lid, no_decay)
    if key not in groups:
        groups[key] = {
            "params": [],
            "weight_decay": 0.0 if no_decay else 0.05,
            "lr": 5e-4 * 0.75 ** (L + 1 - lid),
        }
    groups[key]["params"].append(p)
optimizer = torch.optim.AdamW(list(groups.values()), lr=5e-4)
print(f"param groups {len(groups)}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    pages = torch.randn(B, 3, IMG, IMG, device=device)
    labels = torch.randint(0, NUM_CLASSES, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(pixel_values=pages).logits
        loss = F.cross_entropy(logits, labels, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del pages, labels, logits, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(EVAL_N):
        pages = torch.randn(EVAL_B, 3, IMG, IMG, device=device)
        labels = torch.randint(0, NUM_CLASSES, (EVAL_B,), device=device)
        correct += int((model(pixel_values=pages).logits.argmax(-1) == labels).sum())
print(f"top-1 {correct / (EVAL_N * EVAL_B):.4f}")
del pages, labels
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, optimizer, groups
mim_cfg = BeitConfig(
    hidden_size=H,
    num_hidden_layers=L,
    num_attention_heads=HEADS,
    intermediate_size=4 * H,
    image_size=IMG,
    patch_size=16,
    vocab_size=VOCAB,
    use_mask_token=True,
    use_absolute_position_embeddings=False,
    use_shared_relative_position_bias=True,
    layer_scale_init_value=0.1,
    drop_path_rate=0.1,
)
mim = BeitForMaskedImageModeling(mim_cfg).to(device)
mim_opt = torch.optim.AdamW(mim.parameters(), lr=1.5e-3, betas=(0.9, 0.999), weight_decay=0.05)
n_patches = (IMG // 16) ** 2
n_mask = int(n_patches * 75 / 196)
mim.train()
for step in range(2):
    pages = torch.randn(MIM_B, 3, IMG, IMG, device=device)
    # the data loader's masking generator, on the host: n_mask patches per page
    noise = torch.rand(MIM_B, n_patches, generator=gen)
    ranks = noise.argsort(dim=1).argsort(dim=1)
    bool_masked_pos = (ranks < n_mask).to(device)
    visual_tokens = torch.randint(0, VOCAB, (MIM_B, n_patches), device=device)
    labels = visual_tokens[bool_masked_pos]
    out = mim(pixel_values=pages, bool_masked_pos=bool_masked_pos, labels=labels)
    mim_opt.zero_grad(set_to_none=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(mim.parameters(), 3.0)
    mim_opt.step()
    print(f"mim step {step} loss {out.loss.item():.4f}")
del out, pages, bool_masked_pos, visual_tokens, labels
if device == "cuda":
    print(f"mim peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del mim, mim_opt
vit_cfg = ViTConfig(
    hidden_size=H,
    num_hidden_layers=L,
    num_attention_heads=HEADS,
    intermediate_size=4 * H,
    image_size=VIT_IMG,
    patch_size=16,
    num_labels=NUM_CLASSES,
)
vit = ViTForImageClassification(vit_cfg).to(device).half().eval()
with torch.no_grad():
    pages = torch.randn(VIT_B, 3, VIT_IMG, VIT_IMG, device=device, dtype=torch.float16)
    probs = vit(pixel_values=pages).logits.float().softmax(-1)
print(f"vit probs {tuple(probs.shape)} {probs.max().item():.4f}")
if device == "cuda":
    print(
        f"vit allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
