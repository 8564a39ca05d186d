"""The apex/NVIDIA "data_prefetcher" idiom feeding an MLP-Mixer, under a memory budget with allocator garbage
collection: `PYTORCH_CUDA_ALLOC_CONF="garbage_collection_threshold:0.6"` set in `os.environ` before torch is
imported, then `torch.cuda.set_per_process_memory_fraction(0.05)` (about 4 GB on an H100), so that cached blocks
are reclaimed once reserved memory passes 60% of that.

The prefetcher keeps a ring of two pinned uint8 host buffers (`pin_memory=True`, images 3 x 128 x 128 and int64
labels), refills a buffer on the host only after `Event.synchronize()` on the copy that last read it, copies it
with `non_blocking=True` on a high-priority side stream (`torch.cuda.Stream(priority=-1)`), converts and
normalizes the images there (float, `sub_`/`div_` by the channel statistics), and hands the batch to the
compute stream with `wait_stream` and `record_stream`. The training loop reads `loss.item()` every step and
drops the batch with `del` before asking for the next one.

The model: 16 x 16 patches by `unfold`/`reshape` (64 tokens of 768), a linear stem to 512, 8 Mixer blocks
(token MLP 256, channel MLP 2,048, LayerNorm, GELU), mean pooling, 1,000 classes; bf16 autocast, SGD momentum
0.9 nesterov with weight decay, label smoothing 0.1.

Phases: set-up (model, pinned rings); 24 training steps at batch 256; evaluation under `torch.inference_mode`
at batch 1,024 through a second prefetcher (10 batches); 16 training steps again at batch 256 (the
collector reclaims the evaluation's cached blocks). 4 phases. No value-dependent sizes."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "garbage_collection_threshold:0.6"

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(2953)
torch.cuda.set_per_process_memory_fraction(0.05)
gen = torch.Generator().manual_seed(29530)
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Prefetcher:
    def __init__(self, batch, n):
        self.n, self.i = n, 0
        self.stream = torch.cuda.Stream(priority=-1)
        self.images = [torch.empty(batch, 3, 128, 128, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        self.labels = [torch.empty(batch, dtype=torch.long, pin_memory=True) for _ in range(2)]
        self.done = [torch.cuda.Event(), torch.cuda.Event()]
        self.mean, self.std = MEAN.cuda(), STD.cuda()
        self.preload()

    def preload(self):
        if self.i == self.n:
            self.next_x = None
            return
        slot = self.i % 2
        self.done[slot].synchronize()
        self.images[slot].copy_(
            torch.randint(0, 256, self.images[slot].shape, dtype=torch.uint8, generator=gen)
        )
        self.labels[slot].copy_(torch.randint(0, 1000, self.labels[slot].shape, generator=gen))
        with torch.cuda.stream(self.stream):
            x = self.images[slot].cuda(non_blocking=True)
            self.next_y = self.labels[slot].cuda(non_blocking=True)
            self.done[slot].record(self.stream)
            self.next_x = x.float().sub_(self.mean).div_(self.std)
        self.i += 1

    def next(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        x, y = self.next_x, self.next_y
        if x is not None:
            x.record_stream(torch.cuda.current_stream())
            y.record_stream(torch.cuda.current_stream())
        self.preload()
        return x, y


class MixerBlock(nn.Module):
    def __init__(self, tokens=64, dim=512):
        super().__init__()
        self.n1 = nn.LayerNorm(dim)
        self.tok = nn.Sequential(nn.Linear(tokens, 256), nn.GELU(), nn.Linear(256, tokens))
        self.n2 = nn.LayerNorm(dim)
        self.ch = nn.Sequential(nn.Linear(dim, 2048), nn.GELU(), nn.Linear(2048, dim))

    def forward(self, x):
        x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.n2(x))


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(768, 512)
        self.blocks = nn.Sequential(*[MixerBlock() for _ in range(8)])
        self.norm = nn.LayerNorm(512)
        self.head = nn.Linear(512, 1000)

    def forward(self, img):
        b = img.shape[0]
        p = img.unfold(2, 16, 16).unfold(3, 16, 16).permute(0, 2, 3, 1, 4, 5).reshape(b, 64, 768)
        return self.head(self.norm(self.blocks(self.stem(p))).mean(1))


model = Mixer().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-5)
report("setup")


def train(steps):
    model.train()
    pf = Prefetcher(256, steps)
    losses = []
    while True:
        x, y = pf.next()
        if x is None:
            break
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        del x, y, loss
    print(f"mean loss {sum(losses) / len(losses):.4f}")


train(24)
report("train_24_steps_batch_256_prefetcher")

model.eval()
correct = torch.zeros((), dtype=torch.long, device="cuda")
pf = Prefetcher(1024, 10)
with torch.inference_mode():
    while True:
        x, y = pf.next()
        if x is None:
            break
        with torch.autocast("cuda", dtype=torch.bfloat16):
            correct += (model(x).argmax(1) == y).sum()
        del x, y
print(f"eval accuracy {correct.item() / (10 * 1024):.4f}")
del pf
report("eval_inference_mode_batch_1024_10_batches")

train(16)
report("train_16_steps_again_gc_threshold")
