"""timm's training recipe with `--torchcompile --channels-last --amp-dtype bfloat16`: a ConvNeXt-pico
(timm 1.0, depths 2-2-6-2, widths 64-512, 1000 classes, drop path 0.1) built by `timm.create_model`,
moved to channels-last, compiled with `torch.compile(model)`; fused AdamW (weight decay 0.05),
label-smoothing cross-entropy (0.1), bf16 autocast, batch 64 at 224 x 224, 3 steps; then
`model.eval()` under `torch.no_grad()` with autocast at batch 128 (a recompile for eval mode and the
new batch); then one more training step at batch 64 (the first graph again).
No value-dependent sizes. 4 phases."""

import timm
import torch
import torch.nn as nn

torch.manual_seed(2454)
B, R, C = 64, 224, 1000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("convnext_pico", num_classes=C, drop_path_rate=0.1)
model = model.cuda().to(memory_format=torch.channels_last)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=True)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
report("setup")


def train_step():
    x = torch.randn(B, 3, R, R, device="cuda").contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, C, (B,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(compiled(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


model.train()
for _ in range(3):
    train_step()
report("train_compiled_channels_last_bf16")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    x = torch.randn(2 * B, 3, R, R, device="cuda").contiguous(memory_format=torch.channels_last)
    logits = compiled(x)
    top5 = logits.float().topk(5, dim=1).indices
    del logits, x
report("eval_no_grad_batch128")

model.train()
train_step()
report("train_again")
