"""The batch-size search users write by hand: `torch.cuda.set_per_process_memory_fraction(0.07)`, then a
training step of a torchvision ResNet-50 (fp16 autocast, SGD momentum) tried at batch 32, 64, 128
and 256, each attempt inside `try` / `except torch.cuda.OutOfMemoryError` with the step's tensors dropped
and `torch.cuda.empty_cache()` after every attempt; the largest batch that fitted is then trained for 2
steps (no GradScaler: every step makes its state) with its batches copied from pinned host memory on
a high-priority stream (`torch.cuda.Stream(priority=-1)`) that the compute stream waits on
(`wait_stream`, `record_stream`).

The answer is the batch found and the memory figures; which batch fits is what the twin must get right.
No value-dependent sizes. 3 phases."""

import torch
import torch.nn.functional as F
import torchvision

torch.manual_seed(2372)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


torch.cuda.set_per_process_memory_fraction(0.07)
model = torchvision.models.resnet50(weights=None).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
report("model")


def try_step(batch):
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.zero_grad(set_to_none=True)


found = None
for batch in (32, 64, 128, 256):
    try:
        try_step(batch)
        found = batch
        print("fits", batch)
    except torch.cuda.OutOfMemoryError:
        print("out of memory at", batch)
        opt.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        break
    torch.cuda.empty_cache()
print("found", found)
report("search")

copy_stream = torch.cuda.Stream(priority=-1)
for step in range(2):
    host = torch.randn(found, 3, 224, 224).pin_memory()
    with torch.cuda.stream(copy_stream):
        x = host.cuda(non_blocking=True)
    torch.cuda.current_stream().wait_stream(copy_stream)
    x.record_stream(torch.cuda.current_stream())
    y = torch.randint(0, 1000, (found,), device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("train", step, loss.item())
    del x, loss
report("train found batch")
