"""Training and using CLIPSeg as the paper and the Hugging Face examples do: a CLIPSegForImageSegmentation
built from a CLIPSegConfig of clipseg-rd64's shape (CLIP ViT-B/16 vision tower at image size 224, used at
352 x 352 with interpolated position embeddings; CLIP text tower 512 wide; the 64-wide decoder reading
layers 3, 6 and 9 with FiLM conditioning on the prompt embedding; random init). The CLIP model is frozen
(`model.clip.requires_grad_(False)`) and AdamW trains only the decoder, under bf16 autocast, with the loss
the model computes from `labels=` (BCE with logits on the 352 x 352 masks).

Phases: 0 model and AdamW over the decoder; 1 three steps at batch 64 with text prompts (16 tokens each);
2 three steps at batch 32 with visual prompts: a support image per query passed as
`conditional_pixel_values` (its embedding from the frozen CLIP vision tower); 3 `inference_mode`: 8 images
each queried with 20 prompts, as the HF examples do (`images=[image] * len(prompts)`), in chunks of 40
image-prompt pairs, sigmoid masks kept on the GPU. Seeded; no sizes depend on values."""

import os

import torch
from transformers import CLIPSegConfig, CLIPSegForImageSegmentation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3504)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = CLIPSegConfig(
        text_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2),
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2, patch_size=16
        ),
        projection_dim=32,
        extract_layers=(1, 2, 3),
        reduce_dim=16,
        decoder_intermediate_size=32,
    )
    RES, B1, B2, IMAGES, PROMPTS, CHUNK, TOKENS = 64, 2, 2, 2, 3, 2, 8
else:
    config = CLIPSegConfig(vision_config=dict(patch_size=16, image_size=224))
    RES, B1, B2, IMAGES, PROMPTS, CHUNK, TOKENS = 352, 64, 32, 8, 20, 40, 16
VOCAB = config.text_config.vocab_size


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


model = CLIPSegForImageSegmentation(config).to(device)
model.clip.requires_grad_(False)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, weight_decay=1e-4)
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,}, "
    f"trainable {sum(p.numel() for p in model.parameters() if p.requires_grad):,}"
)
report("phase0 clipseg, clip frozen, adamw over the decoder")


def prompts(n):
    ids = torch.randint(1, VOCAB - 2, (n, TOKENS), device=device)
    ids[:, -1] = VOCAB - 1
    return ids


def images(n):
    return torch.randn(n, 3, RES, RES, device=device)


def masks(n):
    return (torch.rand(n, RES, RES, device=device) > 0.7).float()


model.train()
for step in range(3):
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model(input_ids=prompts(B1), pixel_values=images(B1), labels=masks(B1))
    opt.zero_grad(set_to_none=True)
    out.loss.backward()
    opt.step()
    print(f"text-prompt step {step} loss {out.loss.item():.4f}")
del out
report(f"phase1 three text-prompt steps at {B1}")

for step in range(3):
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model(pixel_values=images(B2), conditional_pixel_values=images(B2), labels=masks(B2))
    opt.zero_grad(set_to_none=True)
    out.loss.backward()
    opt.step()
    print(f"visual-prompt step {step} loss {out.loss.item():.4f}")
del out
report(f"phase2 three visual-prompt steps at {B2}")

model.eval()
results = []
with torch.inference_mode(), torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
    for _ in range(IMAGES):
        image = images(1)
        text = prompts(PROMPTS)
        per_image = []
        for s in range(0, PROMPTS, CHUNK):
            ids = text[s : s + CHUNK]
            logits = model(input_ids=ids, pixel_values=image.expand(ids.shape[0], -1, -1, -1)).logits
            per_image.append(torch.sigmoid(logits))
        results.append(torch.cat(per_image))
print(f"masks {len(results)} x {tuple(results[0].shape)}")
report(f"phase3 inference_mode, {IMAGES} images x {PROMPTS} prompts in chunks of {CHUNK}")
