"""A vision-language-action robot policy, Hugging Face's PI0 (pi-zero, Physical Intelligence) built from a
PI0Config at a small size (random init): a PaliGemma VLM (SigLIP vision tower 384 wide, 6 layers, 224 x 224
images in 14 x 14 patches: 256 tokens per camera; Gemma text model 1024 wide, 8 layers, 8 query heads and 1
key-value head of 128) and a Gemma action expert (the "DiT", 512 wide, 8 layers, the same heads) that attends
to the VLM's key-value cache; chunks of 50 actions of 32 dimensions, a 32-dimensional robot state.

Training is flow matching as the model does it: a time drawn from Beta(1.5, 1) per sample, the noisy action
chunk t * noise + (1 - t) * actions, the MSE of the predicted velocity against noise - actions. The vision
tower is frozen; the rest trains under bf16 `torch.autocast` with a fused AdamW (lr 2.5e-5, weight decay
1e-10, as pi0's recipe), clip_grad_norm_ 1.0. Inference casts the model to bf16 and calls `sample_actions`:
the VLM once over 2 cameras and the prompt to fill a DynamicCache, then 10 Euler denoising steps of the action
expert over that cache (cropped back to the prefix after every step).

Phases: 0 model and optimizer; 1 three steps at batch 8 (2 cameras, 20 prompt tokens: 532 prefix tokens); 2
three steps at batch 16 with the second camera missing in half the samples (`pixel_attention_mask`); 3 the
model cast to bf16, `sample_actions` at batch 32 under `torch.inference_mode`. Seeded; no sizes depend on
values."""

import os

import torch
from transformers import PI0Config, PI0ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(360_05)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    IMG, VW, VL, TW, TL, EW, HD, VOCAB, B1, B2, B3, CHUNK = 28, 32, 1, 64, 2, 32, 16, 512, 2, 2, 2, 4
else:
    IMG, VW, VL, TW, TL, EW, HD, VOCAB, B1, B2, B3, CHUNK = (
        224,
        384,
        6,
        1024,
        8,
        512,
        128,
        257152,
        8,
        16,
        32,
        50,
    )
CAMS, PROMPT, PATCH = 2, 20, 14
IMAGE_TOKENS = (IMG // PATCH) ** 2
IMAGE_TOKEN_ID = VOCAB

config = PI0Config(
    vlm_config=dict(
        model_type="paligemma",
        text_config=dict(
            model_type="gemma",
            hidden_size=TW,
            num_hidden_layers=TL,
            intermediate_size=4 * TW,
            num_attention_heads=8,
            num_key_value_heads=1,
            head_dim=HD,
            vocab_size=VOCAB,
        ),
        vision_config=dict(
            model_type="siglip_vision_model",
            hidden_size=VW,
            intermediate_size=4 * VW,
            num_hidden_layers=VL,
            num_attention_heads=6 if not SMALL else 2,
            patch_size=PATCH,
            image_size=IMG,
            vision_use_head=False,
        ),
        projection_dim=TW,
        image_token_id=IMAGE_TOKEN_ID,
    ),
    dit_config=dict(
        model_type="gemma",
        hidden_size=EW,
        num_hidden_layers=TL,
        intermediate_size=4 * EW,
        num_attention_heads=8,
        num_key_value_heads=1,
        head_dim=HD,
        vocab_size=VOCAB,
    ),
    chunk_size=CHUNK,
    max_state_dim=32,
    max_action_dim=32,
    num_inference_steps=10,
)


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


def batch(n, drop_second_camera=False):
    prompt = torch.randint(1, VOCAB, (n, PROMPT), device=device)
    image_ids = torch.full((n, CAMS * IMAGE_TOKENS), IMAGE_TOKEN_ID, device=device)
    cam_mask = torch.ones(n, CAMS, dtype=torch.bool, device=device)
    if drop_second_camera:
        cam_mask[::2, 1] = False
        image_ids[::2, IMAGE_TOKENS:] = 0
    input_ids = torch.cat([image_ids, prompt], dim=1)
    attention_mask = torch.ones_like(input_ids)
    if drop_second_camera:
        attention_mask[::2, IMAGE_TOKENS : CAMS * IMAGE_TOKENS] = 0
    return dict(
        input_ids=input_ids,
        attention_mask=attention_mask,
        pixel_values=torch.rand(n, CAMS, 3, IMG, IMG, device=device) * 2 - 1,
        pixel_attention_mask=cam_mask,
        state=torch.randn(n, 32, device=device),
    )


model = PI0ForConditionalGeneration(config).to(device)
model.model.vlm.vision_tower.requires_grad_(False)
trainable = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=2.5e-5, weight_decay=1e-10, betas=(0.9, 0.95), fused=cuda)
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,}, "
    f"trainable {sum(p.numel() for p in trainable):,}"
)
report("phase0 PI0ForConditionalGeneration, vision frozen, fused AdamW")


def train_steps(n, drop_second_camera):
    model.train()
    for step in range(3):
        inputs = batch(n, drop_second_camera)
        actions = torch.rand(n, CHUNK, 32, device=device) * 2 - 1
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = model(**inputs, actions=actions).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"batch {n} step {step}: flow matching mse {loss.item():.4f}")


train_steps(B1, False)
report("phase1 flow matching, bf16 autocast, batch 8")
train_steps(B2, True)
report("phase2 flow matching, second camera masked in half, batch 16")

opt.state.clear()  # the AdamW moments freed before the bf16 cast
model = model.to(torch.bfloat16).eval()
inputs = batch(B3)
with torch.inference_mode():
    chunk = model.sample_actions(
        state=inputs["state"].bfloat16(),
        input_ids=inputs["input_ids"],
        pixel_values=inputs["pixel_values"].bfloat16(),
        attention_mask=inputs["attention_mask"],
        pixel_attention_mask=inputs["pixel_attention_mask"],
    )
print(f"action chunk {tuple(chunk.shape)} {chunk.dtype}, mean |a| {chunk.float().abs().mean().item():.3f}")
del chunk, inputs
report("phase3 bf16 sample_actions, 10 denoising steps, batch 32")
