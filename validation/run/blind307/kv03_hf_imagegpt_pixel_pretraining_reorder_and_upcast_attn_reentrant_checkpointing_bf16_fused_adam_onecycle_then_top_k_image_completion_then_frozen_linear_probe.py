"""Image GPT (HF model_type "imagegpt"): an igpt-small-sized ImageGPTForCausalImageModeling (512 wide,
24 layers, 8 heads, 512 colour clusters + the start-of-sequence token, 32 x 32 images as 1,024-token
sequences) with GPT-2's reordered fp32 attention (`reorder_and_upcast_attn`, baddbmm with autocast off)
and attention scaled by the inverse layer index. Phase 1-2: next-pixel pretraining, 3 steps at 24
images under bf16 autocast with reentrant gradient checkpointing (`gradient_checkpointing_enable` with
use_reentrant=True), fused Adam and a one-cycle schedule. Phase 3: image completion: the top three
quarters of 16 images (768 cluster tokens after the SOS token) as the prompt, the last 256 pixels
sampled with top-k 40 by `generate()` under inference_mode. Phase 4: a linear probe: an
ImageGPTForImageClassification gets the pretrained transformer's weights, the transformer frozen
(requires_grad off), the classifier head (mean-pooled last hidden state) trained 3 steps on 64
images with SGD, then evaluated on 128 images.

Phases: 0 model built; 1 first step; 2 two more steps; 3 completion; 4 linear probe."""

import os

import torch
from transformers import ImageGPTConfig, ImageGPTForCausalImageModeling, ImageGPTForImageClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3073)
if SMALL:
    config = ImageGPTConfig(vocab_size=17, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    SIDE, B, GEN_B, NEW, PROBE_B, EVAL_B = 8, 2, 2, 8, 4, 8
else:
    config = ImageGPTConfig(vocab_size=513, n_positions=1024, n_embd=512, n_layer=24, n_head=8)
    SIDE, B, GEN_B, NEW, PROBE_B, EVAL_B = 32, 24, 16, 256, 64, 128
config.reorder_and_upcast_attn = True
config.scale_attn_by_inverse_layer_idx = True
config.num_labels = 10
SOS = config.vocab_size - 1
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def images(n):
    """Colour-cluster sequences with the SOS token in front (the last pixel is only a target)."""
    pixels = torch.randint(0, SOS, (n, SIDE * SIDE))
    return torch.cat([torch.full((n, 1), SOS), pixels[:, :-1]], dim=1).to(device), pixels.to(device)


model = ImageGPTForCausalImageModeling(config).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, betas=(0.9, 0.95), fused=device == "cuda")
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-4, total_steps=3, pct_start=0.34)
report("built")

model.train()
for step in range(3):
    inputs, _ = images(B)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=inputs, labels=inputs)
    out.loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, inputs
    if step == 0:
        report("step0")
report("steps1-2")

model.eval()
prompt, _ = images(GEN_B)
prompt = prompt[:, : SIDE * SIDE - NEW + 1]
with torch.inference_mode():
    completed = model.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=True,
        top_k=40,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        pad_token_id=SOS,
        eos_token_id=None,
    )
pixels = completed[:, 1:].reshape(GEN_B, SIDE, SIDE)
print(f"completed {tuple(pixels.shape)} distinct clusters {pixels.cpu().unique().numel()}")
del completed, pixels, prompt
report("completion")

probe = ImageGPTForImageClassification(config).to(device)
probe.transformer.load_state_dict(model.transformer.state_dict())
probe.transformer.requires_grad_(False)
del model, optimizer, scheduler
head_opt = torch.optim.SGD(probe.score.parameters(), lr=0.1, momentum=0.9)
probe.train()
for _step in range(3):
    inputs, _ = images(PROBE_B)
    labels = torch.randint(0, config.num_labels, (PROBE_B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = probe(input_ids=inputs, labels=labels)
    out.loss.backward()
    head_opt.step()
    head_opt.zero_grad(set_to_none=True)
    del out, inputs, labels
probe.eval()
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    inputs, _ = images(EVAL_B)
    labels = torch.randint(0, config.num_labels, (EVAL_B,), device=device)
    acc = (probe(input_ids=inputs).logits.argmax(-1) == labels).float().mean()
print(f"probe accuracy {acc.item():.3f}")
report("probe")
