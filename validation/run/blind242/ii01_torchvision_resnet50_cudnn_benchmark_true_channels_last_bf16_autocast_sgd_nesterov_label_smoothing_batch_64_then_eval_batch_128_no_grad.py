"""The torchvision reference recipe's loop, as train.py sets it up: `torch.backends.cudnn.benchmark = True`,
ResNet-50 (weights=None) in channels-last, bf16 autocast, SGD with Nesterov momentum and weight decay,
label smoothing 0.1, batch 64 at 224 x 224, three steps; then evaluation under no_grad at batch 128
(new convolution problems: cuDNN times their plans at their first call) and a second evaluation batch.

No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torchvision

torch.backends.cudnn.benchmark = True
torch.manual_seed(2421)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
crit = nn.CrossEntropyLoss(label_smoothing=0.1)
report("setup")

for _ in range(3):
    x = torch.randn(64, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (64,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = crit(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del x, y, loss
report("train_bf16_benchmark_batch64")

model.eval()
with torch.no_grad():
    x = torch.randn(128, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
    del x, out
report("eval_first_batch128")

with torch.no_grad():
    x = torch.randn(128, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
    del x, out
report("eval_second_batch128")
