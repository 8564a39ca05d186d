"""An image classifier trained through `torch.cuda.make_graphed_callables` on the whole module, with the
allocator configured by the script (`PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"` in `os.environ`
before `import torch`): uint8 batches live in pinned host memory and are copied by a side stream
(`non_blocking`, `wait_stream`, `record_stream(torch.cuda.current_stream())`), normalised on the GPU and fed
to the graphed forward; loss and SGD step run eagerly. Afterwards the allocator is switched back to ordinary
segments at run time (`torch.cuda.memory._set_allocator_settings("expandable_segments:False")`), the graphed
model is dropped (its graphed forward closes over the module, a reference cycle, so `gc.collect()` before
`empty_cache()`) and the weights reloaded into an eager copy, whose evaluation batch is then found by doubling
until `torch.OutOfMemoryError` under `set_per_process_memory_fraction` (6 GiB of the card).

Model: torchvision resnet18 (100 classes), fp32, SGD(momentum 0.9, nesterov, foreach), 224 x 224 inputs.

Phases: 0 model, optimizer, 4 pinned uint8 host batches of 64; 1 `make_graphed_callables(model, (sample,),
num_warmup_iters=3)`; 2 ten graphed training steps fed by the prefetcher; 3 settings switched off, the graphed
model and its optimizer dropped, `gc.collect()`, `empty_cache()`, an eager copy evaluated at 256 under
`inference_mode`, `memory_stats()` keys printed; 4 the cap set and the evaluation batch doubled from 256 until
it runs out of memory (caught; cleaned up after the `except` block), then the largest batch that fit run once
more. 5 phases. Seeded."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import gc

import torch
import torch.nn.functional as F
from torchvision.models import resnet18

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3435)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    B, IMG, STEPS, EVAL, LIMIT = 4, 64, 2, 8, 32
else:
    B, IMG, STEPS, EVAL, LIMIT = 64, 224, 10, 256, 1 << 14
CLASSES = 100
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def report(tag):
    if cuda:
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


class Prefetcher:
    def __init__(self, host):
        self.host, self.i = host, 0
        self.stream = torch.cuda.Stream() if cuda else None
        self.mean, self.std = MEAN.to(device), STD.to(device)
        self.load()

    def load(self):
        x, y = self.host[self.i % len(self.host)]
        self.i += 1
        if self.stream is None:
            self.next = (x.clone(), y.clone())
            return
        with torch.cuda.stream(self.stream):
            self.next = (x.to(device, non_blocking=True), y.to(device, non_blocking=True))

    def get(self):
        if self.stream is not None:
            torch.cuda.current_stream().wait_stream(self.stream)
            for t in self.next:
                t.record_stream(torch.cuda.current_stream())
        x, y = self.next
        self.load()
        return (x.float() - self.mean) / self.std, y


def host_batch(n):
    x = torch.randint(0, 256, (n, 3, IMG, IMG), dtype=torch.uint8)
    y = torch.randint(0, CLASSES, (n,))
    return (x.pin_memory(), y.pin_memory()) if cuda else (x, y)


model = resnet18(num_classes=CLASSES).to(device)
opt = torch.optim.SGD(
    model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5, foreach=True
)
loader = Prefetcher([host_batch(B) for _ in range(4)])
report("resnet18, SGD, pinned uint8 batches")

if cuda:
    sample = torch.randn(B, 3, IMG, IMG, device=device)
    model = torch.cuda.make_graphed_callables(model, (sample,), num_warmup_iters=3)
    del sample
report("make_graphed_callables on the whole module")

for _step in range(STEPS):
    x, y = loader.get()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print(f"graphed training: loss {loss.item():.4f}")
report("ten graphed training steps, side-stream prefetch with record_stream")

if cuda:
    torch.cuda.memory._set_allocator_settings("expandable_segments:False")
state = {k: v.detach().clone() for k, v in model.state_dict().items()}
del model, opt, loader, x, y, loss
gc.collect()
if cuda:
    torch.cuda.empty_cache()
eager = resnet18(num_classes=CLASSES).to(device).eval()
eager.load_state_dict(state)
del state
with torch.inference_mode():
    top = eager(torch.randn(EVAL, 3, IMG, IMG, device=device)).argmax(-1)
print(f"eager eval at {EVAL}: first classes {top[:4].tolist()}")
if cuda:
    stats = torch.cuda.memory_stats()
    print(
        {
            k: stats[k]
            for k in ("segment.all.current", "reserved_bytes.all.current", "num_device_free", "num_ooms")
        }
    )
report("expandable segments off, graphs collected, eager evaluation")

if cuda:
    torch.cuda.set_per_process_memory_fraction(6 * 2**30 / torch.cuda.get_device_properties(0).total_memory)
n, best = EVAL, None
while n <= LIMIT:
    failed = False
    try:
        with torch.inference_mode():
            out = eager(torch.randn(n, 3, IMG, IMG, device=device))
        del out
    except torch.OutOfMemoryError:
        failed = True
    if failed:
        if cuda:
            torch.cuda.empty_cache()
        print(f"batch {n}: out of memory")
        break
    best = n
    n *= 2
with torch.inference_mode():
    top = eager(torch.randn(best, 3, IMG, IMG, device=device)).argmax(-1)
print(f"largest evaluation batch {best}, {top.numel()} predictions")
report("6 GiB cap, evaluation batch doubled until out of memory")
