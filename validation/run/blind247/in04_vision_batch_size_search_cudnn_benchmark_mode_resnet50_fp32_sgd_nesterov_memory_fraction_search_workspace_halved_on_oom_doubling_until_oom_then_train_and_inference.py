"""A vision training script's batch-size search with `torch.backends.cudnn.benchmark = True`: a
torchvision ResNet-50 in fp32 (NCHW, cuDNN's TF32 default), SGD with momentum and nesterov, under
`torch.cuda.set_per_process_memory_fraction(0.05)` (7.5 GB). Each trial is one training step on a
batch of 224 x 224 images (32, 64, 128, 256: doubling until `torch.cuda.OutOfMemoryError`), with
`zero_grad(set_to_none=True)` and `torch.cuda.empty_cache()` after the trial, after the `except`
block for a failed one. Under benchmark mode every new convolution problem's first call times
cuDNN's plans in a workspace as large as the largest plan's, halved after each out-of-memory until
one fits (`generate_and_filter_plans`), and a plan whose workspace does not fit gives way to the
next (`try_configs`/`try_plans`). Then 3 steps at the largest batch that fitted, then evaluation
under `torch.inference_mode` at that batch.

The answer is the batch found and the memory figures. No value-dependent sizes. 4 phases."""

import torch
import torch.nn.functional as F
import torchvision

torch.manual_seed(2477)
torch.backends.cudnn.benchmark = True


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


torch.cuda.set_per_process_memory_fraction(0.05)
model = torchvision.models.resnet50(weights=None).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
report("setup")


def step(batch):
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


found = None
for batch in (32, 64, 128, 256):
    try:
        step(batch)
        found = batch
        print("fits", batch)
    except torch.cuda.OutOfMemoryError:
        print("out of memory at", batch)
        opt.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        break
    torch.cuda.empty_cache()
print("found batch", found)
report("search")

model.train()
for i in range(3):
    loss = step(found)
    print("step", i, round(loss.item(), 3))
del loss
report("train_found_batch")

model.eval()
with torch.inference_mode():
    x = torch.randn(found, 3, 224, 224, device="cuda")
    print("predicted", model(x).argmax(-1).shape[0])
    del x
report("inference")
