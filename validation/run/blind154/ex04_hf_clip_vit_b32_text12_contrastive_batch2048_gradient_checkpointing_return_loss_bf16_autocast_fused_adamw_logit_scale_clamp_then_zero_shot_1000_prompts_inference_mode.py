"""CLIP trained contrastively with a large batch as an OpenCLIP-style loop on Hugging Face's
CLIPModel from CLIPConfig (a ViT-B/32 image tower: 224 x 224, patch 32, 768 wide, 12 layers; a
12-layer text transformer 512 wide over 77 tokens, vocabulary 49,408; a 512-wide projection; fp32
weights): batches of 2,048 image-caption pairs (captions padded to 77 with an attention_mask, each
12..77 tokens, the end-of-text id the largest), model(..., return_loss=True) for the symmetric
InfoNCE loss, gradient checkpointing on both towers (gradient_checkpointing_enable()), bf16
autocast, fused AdamW (lr 5e-4, betas 0.9/0.98, weight decay 0.2) with cosine decay, the logit scale
clamped to log(100) after each step, 3 steps (the first its own phase); then zero-shot
classification under inference_mode and bf16 autocast: 1,000 class prompts encoded and normalized in
chunks of 250, then 4,096 images in chunks of 1,024 scored against them (top-5); 5 phases."""

import math
import os

import torch
import torch.nn.functional as F
from transformers import CLIPConfig, CLIPModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15404)
if SMALL:
    text_cfg = dict(
        vocab_size=300,
        eos_token_id=299,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
    )
    vision_cfg = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=64,
        patch_size=16,
    )
    B, CTX, STEPS, CLASSES, CCHUNK, IMAGES, ICHUNK, HW = 8, 16, 2, 10, 5, 16, 8, 64
    proj = 16
else:
    text_cfg = dict(
        vocab_size=49408,
        hidden_size=512,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=8,
        max_position_embeddings=77,
    )
    vision_cfg = dict(
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        image_size=224,
        patch_size=32,
    )
    B, CTX, STEPS, CLASSES, CCHUNK, IMAGES, ICHUNK, HW = 2048, 77, 3, 1000, 250, 4096, 1024, 224
    proj = 512
config = CLIPConfig(text_config=text_cfg, vision_config=vision_cfg, projection_dim=proj)
EOT = config.text_config.vocab_size - 1
device = "cuda" if torch.cuda.is_available() else "cpu"
model = CLIPModel(config).to(device)
model.gradient_checkpointing_enable()
decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embedding" not in n]
rest = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embedding" not in n)]
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.2}, {"params": rest, "weight_decay": 0.0}],
    lr=5e-4,
    betas=(0.9, 0.98),
    eps=1e-6,
    fused=device == "cuda",
)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=1000)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def captions(n):
    ids = torch.randint(1, EOT, (n, CTX), device=device)
    mask = torch.ones(n, CTX, dtype=torch.long, device=device)
    lengths = [12 + (i * 7) % (CTX - 11) for i in range(n)] if not SMALL else [4 + i % 12 for i in range(n)]
    for i, n_tok in enumerate(lengths):
        ids[i, n_tok - 1] = EOT
        ids[i, n_tok:] = 0
        mask[i, n_tok:] = 0
    return ids, mask


def images(n):
    x = torch.rand(n, 3, HW, HW, device=device)
    mean = torch.tensor([0.4815, 0.4578, 0.4082], device=device).view(1, 3, 1, 1)
    std = torch.tensor([0.2686, 0.2613, 0.2758], device=device).view(1, 3, 1, 1)
    return (x - mean) / std


model.train()
for step in range(STEPS):
    ids, mask = captions(B)
    pixels = images(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_ids=ids, attention_mask=mask, pixel_values=pixels, return_loss=True).loss
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        model.logit_scale.clamp_(0, math.log(100))
    print(f"step {step} loss {loss.item():.4f} scale {model.logit_scale.exp().item():.2f}")
    del ids, mask, pixels, loss
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    prompts = []
    for start in range(0, CLASSES, CCHUNK):
        ids, mask = captions(CCHUNK)
        prompts.append(
            F.normalize(
                model.get_text_features(input_ids=ids, attention_mask=mask).pooler_output.float(), dim=-1
            )
        )
    classifier = torch.cat(prompts).t().contiguous()
    del prompts, ids, mask
    if device == "cuda":
        print(f"prompts peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    top5 = []
    for start in range(0, IMAGES, ICHUNK):
        feats = F.normalize(
            model.get_image_features(pixel_values=images(ICHUNK)).pooler_output.float(), dim=-1
        )
        top5.append((100.0 * feats @ classifier).softmax(-1).topk(5, dim=-1).indices.cpu())
    print(f"zero-shot {tuple(torch.cat(top5).shape)}")
if device == "cuda":
    print(f"zero-shot peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
