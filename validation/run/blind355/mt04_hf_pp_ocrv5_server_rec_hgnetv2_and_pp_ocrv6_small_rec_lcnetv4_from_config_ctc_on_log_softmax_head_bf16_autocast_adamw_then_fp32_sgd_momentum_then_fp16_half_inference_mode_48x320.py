"""Text-line recognition fine-tuning with the PaddleOCR recognizers of transformers, built from their
default configs (random init): PPOCRV5ServerRecForTextRecognition (HGNetV2 backbone, SVTR neck, 18,385
classes) and PPOCRV6SmallRecForTextRecognition (PP-LCNetV4 backbone, 18,714 classes). Their heads end in a
softmax, so the CTC loss is written on `probs.clamp_min(1e-8).log()` with blank 0 (F.ctc_loss on
(T, N, C) float32 log-probabilities, 25-character targets, T = width / 8).

Phases: 0 both models built in fp32, AdamW for v5 (lr 5e-4, weight decay 1e-2), SGD momentum 0.9 for v6;
1 three v5 steps at batch 128 on 48 x 320 line crops under bf16 autocast; 2 three v6 steps at batch 128 in
fp32; 3 both models `.half()` under inference_mode, two batches of 256 at 48 x 320.
Seeded; no sizes depend on values."""

import os

import torch
import torch.nn.functional as F
from transformers import (
    PPOCRV5ServerRecConfig,
    PPOCRV5ServerRecForTextRecognition,
    PPOCRV6SmallRecConfig,
    PPOCRV6SmallRecForTextRecognition,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3554)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    B1, B2, B3, CHARS = 2, 3, 4, 6
else:
    B1, B2, B3, CHARS = 128, 128, 256, 25
HEIGHT, WIDTH = 48, 320


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


v5 = PPOCRV5ServerRecForTextRecognition(PPOCRV5ServerRecConfig()).to(device)
v6 = PPOCRV6SmallRecForTextRecognition(PPOCRV6SmallRecConfig()).to(device)
opt5 = torch.optim.AdamW(v5.parameters(), lr=5e-4, weight_decay=1e-2)
opt6 = torch.optim.SGD(v6.parameters(), lr=1e-3, momentum=0.9)
print(
    f"v5 server rec {sum(p.numel() for p in v5.parameters()):,}, "
    f"v6 small rec {sum(p.numel() for p in v6.parameters()):,}"
)
report("phase0 pp-ocrv5 server rec + adamw, pp-ocrv6 small rec + sgd")


def ctc(probs, classes):
    log_probs = probs.float().clamp_min(1e-8).log().transpose(0, 1)
    frames, batch = log_probs.shape[:2]
    targets = torch.randint(1, classes, (batch, CHARS), device=device)
    input_lengths = torch.full((batch,), frames, dtype=torch.long, device=device)
    target_lengths = torch.full((batch,), CHARS, dtype=torch.long, device=device)
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=True)


def train(model, opt, batch, autocast, tag):
    model.train()
    classes = model.config.head_out_channels
    for step in range(3):
        lines = torch.randn(batch, 3, HEIGHT, WIDTH, device=device)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda and autocast):
            probs = model(pixel_values=lines).last_hidden_state
        loss = ctc(probs, classes)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"{tag} step {step} frames {probs.shape[1]} loss {loss.item():.4f}")
    del probs, loss


train(v5, opt5, B1, True, "v5")
report(f"phase1 v5 server rec, three ctc steps at batch {B1} x {HEIGHT}x{WIDTH}, bf16 autocast")

train(v6, opt6, B2, False, "v6")
report(f"phase2 v6 small rec, three fp32 ctc steps at batch {B2}")

del opt5, opt6
for model in (v5, v6):
    model.half().eval()
    with torch.inference_mode():
        for _ in range(2):
            lines = torch.randn(B3, 3, HEIGHT, WIDTH, device=device, dtype=torch.float16)
            best = model(pixel_values=lines).last_hidden_state.argmax(-1)
            print(f"{type(model).__name__} {tuple(best.shape)}")
            del lines, best
report(f"phase3 fp16 half inference_mode, two batches of {B3} x {HEIGHT}x{WIDTH}")
