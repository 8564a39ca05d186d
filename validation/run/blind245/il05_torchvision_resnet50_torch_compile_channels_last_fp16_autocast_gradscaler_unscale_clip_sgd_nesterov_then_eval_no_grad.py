"""The classic mixed-precision ImageNet recipe compiled: torchvision's ResNet-50 (1000 classes),
channels-last, `torch.compile(model)`, fp16 autocast with `torch.amp.GradScaler` (init scale 1024,
whose gradients stay finite here), `scaler.unscale_` then `clip_grad_norm_` (max norm 5),
SGD with Nesterov momentum 0.9 and weight decay 1e-4, batch 64 at 224 x 224, 3 steps; then
`model.eval()` under `torch.no_grad()` and fp16 autocast at batch 128 (a recompile for eval mode:
batch norm's running statistics); then one more training step.
No value-dependent sizes. 4 phases."""

import torch
import torch.nn.functional as F
import torchvision

torch.manual_seed(2455)
B, R, C = 64, 224, 1000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = torchvision.models.resnet50(num_classes=C).cuda().to(memory_format=torch.channels_last)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cuda", init_scale=1024.0)
report("setup")


def train_step():
    x = torch.randn(B, 3, R, R, device="cuda").contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, C, (B,), device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(compiled(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)


model.train()
for _ in range(3):
    train_step()
report("train_compiled_fp16_gradscaler")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    x = torch.randn(2 * B, 3, R, R, device="cuda").contiguous(memory_format=torch.channels_last)
    probs = compiled(x).float().softmax(dim=1)
    del x
report("eval_no_grad_batch128")

model.train()
train_step()
report("train_again")
