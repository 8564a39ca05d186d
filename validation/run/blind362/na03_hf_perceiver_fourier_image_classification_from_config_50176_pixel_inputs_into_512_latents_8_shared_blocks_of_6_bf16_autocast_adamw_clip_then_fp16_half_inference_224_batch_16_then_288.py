"""ImageNet-style classification with the Perceiver on raw pixels, as deepmind/vision-perceiver-fourier does,
with the weights random: a PerceiverForImageClassificationFourier from a PerceiverConfig of that checkpoint's
sizes (every one of the 224 x 224 pixels an input: 3 RGB channels concatenated with 258 Fourier position
features of 64 bands, d_model 261; one cross-attention with 1 head from 512 latents of 1,024 into the 50,176
inputs; 8 blocks of 6 self-attention layers, the blocks sharing their weights; a learned-query decoder to
1,000 classes).

Phases: 0 the model in fp32; 1 training at batch 8 under bf16 autocast with AdamW (foreach), cross-entropy on
random labels, `clip_grad_norm_` at 1.0, 2 steps; 2 the model `.half()` and eval, `inference_mode`, two
batches of 16 images at 224 x 224, the logits and top-5 classes kept; 3 the same fp16 model on 8 images of 288
x 288 (82,944 inputs: the Fourier features are computed for any input size). Seeded; no shape depends on
values."""

import os

import torch
from transformers import PerceiverConfig, PerceiverForImageClassificationFourier

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3623)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = PerceiverConfig(
        d_model=261,
        num_latents=16,
        d_latents=32,
        num_blocks=2,
        num_self_attends_per_block=2,
        num_self_attention_heads=2,
        num_cross_attention_heads=1,
        image_size=32,
        num_labels=10,
    )
    B1, B2, B3, S1, S2 = 2, 4, 2, 32, 40
else:
    config = PerceiverConfig(
        d_model=261,
        num_latents=512,
        d_latents=1024,
        num_blocks=8,
        num_self_attends_per_block=6,
        num_self_attention_heads=8,
        num_cross_attention_heads=1,
        image_size=224,
        num_labels=1000,
    )
    B1, B2, B3, S1, S2 = 8, 16, 8, 224, 288


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


model = PerceiverForImageClassificationFourier(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05)
print(f"parameters {sum(p.numel() for p in model.parameters()):,}")
report("phase0 perceiver fourier fp32")

model.train()
for step in range(2):
    images = torch.randn(B1, 3, S1, S1, device=device)
    labels = torch.randint(0, config.num_labels, (B1,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(inputs=images, labels=labels)
    out.loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f} grad norm {norm.item():.3f}")
    del out
report(f"phase1 bf16 autocast adamw clip batch {B1} at {S1}")

del optimizer
model.half().eval()
kept = []
with torch.inference_mode():
    for batch in range(2):
        images = torch.randn(B2, 3, S1, S1, device=device, dtype=torch.float16)
        logits = model(inputs=images).logits
        kept.append((logits, logits.topk(5, dim=-1).indices))
        print(f"eval batch {batch} logits {tuple(logits.shape)} {logits.dtype}")
report(f"phase2 fp16 half inference_mode 2 batches of {B2} at {S1}")

del kept, logits
with torch.inference_mode():
    images = torch.randn(B3, 3, S2, S2, device=device, dtype=torch.float16)
    logits = model(inputs=images).logits
    top5 = logits.topk(5, dim=-1).indices
    print(f"{S2} logits {tuple(logits.shape)} top5 {tuple(top5.shape)}")
report(f"phase3 fp16 half inference_mode batch {B3} at {S2}")
