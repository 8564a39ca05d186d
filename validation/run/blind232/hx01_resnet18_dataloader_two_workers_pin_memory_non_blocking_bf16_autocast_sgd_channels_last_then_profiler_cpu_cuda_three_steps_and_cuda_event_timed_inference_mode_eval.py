"""An image classifier trained from a DataLoader with worker processes and pinned memory, as the ImageNet
example does: a map-style dataset of synthetic 3x160x160 images (each drawn on the CPU from a generator
seeded by its index, label = index % 100), DataLoader(num_workers=2, pin_memory=True, drop_last=True), each
batch moved with .cuda(non_blocking=True) and converted to channels_last on the GPU. torchvision's
resnet18 (100 classes, channels_last) under bf16 autocast with SGD (momentum 0.9, nesterov, weight decay)
and a cosine schedule. Sizes never follow data values (fixed batch sizes, drop_last).

Phases: 6 training steps at batch 64; 3 more training steps inside torch.profiler.profile(activities=[CPU,
CUDA]) with prof.step() after each and the profiler's key_averages() read after it; an inference_mode
evaluation at batch 128 (a second DataLoader, 2 workers, pin_memory) of 4 batches, each timed with
torch.cuda.Event(enable_timing=True) pairs and elapsed_time, top-5 accuracy. 3 phases."""

import torch
import torch.nn.functional as F
import torchvision
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(2321)
device = "cuda"


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class SyntheticImages(Dataset):
    def __init__(self, n, size=160):
        self.n, self.size = n, size

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(1000 + i)
        return torch.randn(3, self.size, self.size, generator=g), i % 100


def main():
    train = DataLoader(SyntheticImages(64 * 9), batch_size=64, shuffle=True, num_workers=2, pin_memory=True,
                       drop_last=True, generator=torch.Generator().manual_seed(7))
    model = torchvision.models.resnet18(num_classes=100).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=9)

    def step(images, labels):
        images = images.cuda(non_blocking=True).contiguous(memory_format=torch.channels_last)
        labels = labels.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        return loss.detach()

    model.train()
    it = iter(train)
    for _ in range(6):
        images, labels = next(it)
        loss = step(images, labels)
    print("train loss", float(loss))
    report("train_workers_pinned")

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            images, labels = next(it)
            loss = step(images, labels)
            prof.step()
    print("profiled loss", float(loss), "events", len(prof.key_averages()))
    report("profiled_steps")

    evalset = DataLoader(SyntheticImages(128 * 4), batch_size=128, shuffle=False, num_workers=2, pin_memory=True)
    model.eval()
    correct, times = 0, []
    with torch.inference_mode():
        for images, labels in evalset:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            images = images.cuda(non_blocking=True).contiguous(memory_format=torch.channels_last)
            labels = labels.cuda(non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(images)
            top5 = logits.topk(5, dim=1).indices
            correct += int((top5 == labels[:, None]).any(dim=1).sum())
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    print("top5", correct / 512, "ms per batch", sum(times) / len(times) > 0)
    report("eval_event_timed")


if __name__ == "__main__":
    main()
