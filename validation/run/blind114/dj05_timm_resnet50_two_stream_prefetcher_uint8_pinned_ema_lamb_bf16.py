"""An ImageNet training loop with the data path on the GPU, as NVIDIA's Apex example writes its
prefetcher: uint8 NHWC host batches in pinned memory copied non_blocking on a side stream, normalized
there into channels-last float, the main stream waiting on it and record_stream on each batch; an EMA
of the weights updated on a second side stream (_foreach_lerp_) that the next step waits for; a timm
ResNet-50 in channels-last under bf16 autocast, timm's LAMB, batch 128, 6 iterations; then the EMA
model evaluated on one prefetched batch under inference_mode; 5 phases."""

import copy
import os

import timm
import timm.optim
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11405)
B, IMG, ITERS = (4, 64, 4) if SMALL else (128, 224, 6)
device = "cuda" if torch.cuda.is_available() else "cpu"
assert device == "cuda", "the prefetcher needs CUDA streams"

model = timm.create_model("resnet18" if SMALL else "resnet50", num_classes=1000).to(
    device, memory_format=torch.channels_last
)
ema = copy.deepcopy(model).eval().requires_grad_(False)
optimizer = timm.optim.create_optimizer_v2(model, "lamb", lr=5e-3, weight_decay=0.02)
host = [
    (
        torch.randint(0, 256, (B, IMG, IMG, 3), dtype=torch.uint8).pin_memory(),
        torch.randint(0, 1000, (B,)).pin_memory(),
    )
    for _ in range(ITERS + 1)
]


class Prefetcher:
    def __init__(self, batches):
        self.it = iter(batches)
        self.stream = torch.cuda.Stream()
        self.mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
        self.preload()

    def preload(self):
        try:
            x, y = next(self.it)
        except StopIteration:
            self.x = self.y = None
            return
        with torch.cuda.stream(self.stream):
            x = x.to(device, non_blocking=True)
            self.y = y.to(device, non_blocking=True)
            x = x.permute(0, 3, 1, 2).float().sub_(self.mean).div_(self.std)
            self.x = x.contiguous(memory_format=torch.channels_last)

    def next(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        x, y = self.x, self.y
        if x is not None:
            x.record_stream(torch.cuda.current_stream())
            y.record_stream(torch.cuda.current_stream())
        self.preload()
        return x, y


ema_stream = torch.cuda.Stream()
params, ema_params = list(model.parameters()), list(ema.parameters())
print(f"model {torch.cuda.memory_allocated()}")
torch.cuda.reset_peak_memory_stats()
loader = Prefetcher(host[:ITERS])
for it in range(ITERS):
    x, y = loader.next()
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    torch.cuda.current_stream().wait_stream(ema_stream)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    ema_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(ema_stream):
        torch._foreach_lerp_(ema_params, params, 1e-3)
        for b_ema, b in zip(ema.buffers(), model.buffers(), strict=True):
            b_ema.copy_(b)
    del x, y
    if it % 2 == 1:
        print(
            f"iter {it} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss
torch.cuda.current_stream().wait_stream(ema_stream)
loader = Prefetcher(host[ITERS:])
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    x, y = loader.next()
    acc = (ema(x).argmax(1) == y).float().mean()
print(
    f"ema eval acc {acc.item():.3f} peak {torch.cuda.max_memory_allocated()}"
    f" reserved {torch.cuda.memory_reserved()}"
)
