"""Meta's V-JEPA 2 from config as a video classifier (the Something-Something-v2 recipe of its model
card): a ViT-L encoder (24 layers of d 1,024, 16 heads, MLP 4,096) on 16-frame 256 x 256 clips cut
into 2 x 16 x 16 tubelets by a Conv3d (2,048 tokens a clip) with 3-D rotary positions on the
depth / height / width thirds of each head, an attentive pooler (3 self-attention layers and a
cross-attention from one learned query) and a 174-way linear head; the masked-prediction predictor
(12 layers of d 384) is built too but skipped. fp32 weights under bf16 autocast. First an attentive
probe: the encoder frozen (`requires_grad_(False)`), 4 AdamW steps on the pooler and head with 8
clips; then a full fine-tune: everything trainable, drop path 0.1, non-reentrant gradient
checkpointing, a fresh fused AdamW with weight decay, 4 steps on 4 clips; then evaluation under
`torch.inference_mode()` on 2 clips of 64 frames (8,192 tokens, the model card's inference length)
and on 8 clips of 16. Labels drawn on the device; no value-dependent sizes. 4 phases."""

import torch
from transformers import VJEPA2Config, VJEPA2ForVideoClassification

torch.manual_seed(2694)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = VJEPA2Config(
    patch_size=16,
    crop_size=256,
    frames_per_clip=16,
    tubelet_size=2,
    hidden_size=1024,
    num_attention_heads=16,
    num_hidden_layers=24,
    mlp_ratio=4.0,
    drop_path_rate=0.1,
    num_pooler_layers=3,
    pred_hidden_size=384,
    pred_num_hidden_layers=12,
    pred_num_attention_heads=12,
    num_labels=174,
)
model = VJEPA2ForVideoClassification(cfg).cuda()
report("vjepa2_built_fp32")

MEAN = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 1, 3, 1, 1)


def videos(n, frames):
    clip = torch.randint(0, 256, (n, frames, 3, 256, 256), device="cuda", dtype=torch.uint8)
    return (clip.float() / 255 - MEAN) / STD, torch.randint(0, 174, (n,), device="cuda")


model.vjepa2.requires_grad_(False)
head = [p for n, p in model.named_parameters() if not n.startswith("vjepa2.")]
probe_opt = torch.optim.AdamW(head, lr=1e-3, weight_decay=0.01)
model.train()
for step in range(4):
    x, y = videos(8, 16)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(pixel_values_videos=x, labels=y).loss
    loss.backward()
    probe_opt.step()
    probe_opt.zero_grad(set_to_none=True)
    print("probe", step, round(loss.item(), 3))
report("attentive_probe_frozen_encoder")

del probe_opt
model.vjepa2.requires_grad_(True)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.05, fused=True)
for step in range(4):
    x, y = videos(4, 16)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(pixel_values_videos=x, labels=y).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("finetune", step, round(loss.item(), 3))
report("full_fine_tune_checkpointed")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    x, _ = videos(2, 64)
    print("long", model(pixel_values_videos=x).logits.argmax(-1).tolist())
    x, _ = videos(8, 16)
    print("short", model(pixel_values_videos=x).logits.argmax(-1).tolist())
report("inference_mode_64_and_16_frames")
