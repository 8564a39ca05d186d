"""NVIDIA Apex's ImageNet data_prefetcher around a DataLoader (pin_memory=True, num_workers=0) of
decoded uint8 NHWC images: the next batch copied non_blocking from pinned memory on a side
torch.cuda.Stream, converted there to float, permuted to NCHW and made channels_last, jittered
(v2.ColorJitter of brightness/contrast/saturation/hue on the batch) and normalized, the main
stream waiting on the side stream (wait_stream) and record_stream on the batch it takes; a timm
ConvNeXt-Tiny (drop_path 0.1) in channels_last under bf16 autocast, fused AdamW, label smoothing
0.1, batch 96, 6 steps timed with torch.cuda.Event(enable_timing=True); then the prefetcher over
a validation DataLoader of 2 batches under inference_mode; 5 phases."""

import contextlib
import os

import timm
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torchvision.transforms import v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15202)
B, IMG, STEPS, NCLS = (4, 64, 4, 10) if SMALL else (96, 224, 6, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"

train_ds = TensorDataset(
    torch.randint(0, 256, (B * STEPS, IMG, IMG, 3), dtype=torch.uint8),
    torch.randint(0, NCLS, (B * STEPS,)),
)
val_ds = TensorDataset(
    torch.randint(0, 256, (B * 2, IMG, IMG, 3), dtype=torch.uint8),
    torch.randint(0, NCLS, (B * 2,)),
)
jitter = v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)


class DataPrefetcher:
    def __init__(self, loader, augment):
        self.loader = iter(loader)
        self.augment = augment
        self.stream = torch.cuda.Stream() if cuda else None
        self.mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
        self.std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)
        self.preload()

    def preload(self):
        try:
            self.next_input, self.next_target = next(self.loader)
        except StopIteration:
            self.next_input = self.next_target = None
            return
        ctx = torch.cuda.stream(self.stream) if cuda else contextlib.nullcontext()
        with ctx:
            x = self.next_input.to(device, non_blocking=True)
            self.next_target = self.next_target.to(device, non_blocking=True)
            x = x.permute(0, 3, 1, 2).float().div_(255)
            x = x.contiguous(memory_format=torch.channels_last)
            if self.augment:
                x = jitter(x)
            self.next_input = x.sub_(self.mean).div_(self.std)

    def next(self):
        if cuda:
            torch.cuda.current_stream().wait_stream(self.stream)
        x, y = self.next_input, self.next_target
        if cuda and x is not None:
            x.record_stream(torch.cuda.current_stream())
            y.record_stream(torch.cuda.current_stream())
        self.preload()
        return x, y


model = timm.create_model("convnext_nano" if SMALL else "convnext_tiny", num_classes=NCLS, drop_path_rate=0.1)
model = model.to(device, memory_format=torch.channels_last)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=cuda)
if cuda:
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

train_loader = DataLoader(train_ds, batch_size=B, shuffle=True, num_workers=0, pin_memory=True)
prefetcher = DataPrefetcher(train_loader, augment=True)
model.train()
times = []
x, y = prefetcher.next()
step = 0
while x is not None:
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if cuda:
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    if cuda and step % 2 == 1:
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    step += 1
    x, y = prefetcher.next()

del loss
model.eval()
val_loader = DataLoader(val_ds, batch_size=B, shuffle=False, num_workers=0, pin_memory=True)
prefetcher = DataPrefetcher(val_loader, augment=False)
correct = total = 0
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    x, y = prefetcher.next()
    while x is not None:
        correct += int((model(x).argmax(1) == y).sum())
        total += y.numel()
        x, y = prefetcher.next()
if cuda:
    print(
        f"val acc {correct / total:.4f} steps {len(times)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
