"""timm's HaloNet-26t (ResNet-26t whose 3x3 convolutions in the later stages are replaced by blocked
local self-attention with a halo of neighbouring pixels) trained the way timm's train.py feeds it:
a ``DataLoader`` of uint8 images collated by ``timm.data.fast_collate`` (pinned), wrapped in
``timm.data.PrefetchLoader``, which copies the next batch on a side CUDA stream, normalises it there
(mean/std scaled to 0-255) and applies per-sample ``RandomErasing`` in 'pixel' mode on the device,
then makes the compute stream wait on the side stream. Model in channels_last, bf16 autocast,
``create_optimizer_v2(..., 'adamp')``, label-smoothing cross-entropy.

Phases: 0 model, optimizer and loaders; 1 one epoch of 6 training steps of batch 32 at 256 through the
prefetcher; 2 evaluation through a second PrefetchLoader whose images are produced in bf16
(``img_dtype``), logits gathered; 3 top-1/top-5 from the gathered logits and a confusion count."""

import random

import timm
import torch
import torch.nn.functional as F
from timm.data.loader import PrefetchLoader, fast_collate
from timm.optim import create_optimizer_v2

random.seed(3241)  # timm RandomErasing draws its boxes from Python's random
torch.manual_seed(3241)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
NUM_CLASSES = 200
B, R, N_TRAIN, N_EVAL = 32, 256, 192, 160


def report(tag):
    if device.type == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class UInt8Images(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (n, 3, R, R), generator=g, dtype=torch.uint8)
        self.labels = torch.randint(0, NUM_CLASSES, (n,), generator=g).tolist()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def make_loader(n, seed, shuffle, img_dtype, re_prob):
    loader = torch.utils.data.DataLoader(
        UInt8Images(n, seed),
        batch_size=B,
        shuffle=shuffle,
        num_workers=0,
        collate_fn=fast_collate,
        pin_memory=device.type == "cuda",
        drop_last=shuffle,
    )
    return PrefetchLoader(loader, device=device, img_dtype=img_dtype, re_prob=re_prob, re_mode="pixel")


model = timm.create_model("halonet26t", pretrained=False, num_classes=NUM_CLASSES, drop_path_rate=0.05)
model = model.to(device).to(memory_format=torch.channels_last)
opt = create_optimizer_v2(model, "adamp", lr=2e-3, weight_decay=0.02)
train_loader = make_loader(N_TRAIN, 1, True, torch.float32, 0.25)
eval_loader = make_loader(N_EVAL, 2, False, torch.bfloat16, 0.0)
report("model")

model.train()
for step, (x, y) in enumerate(train_loader):
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        logits = model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device.type == "cuda":
        print(f"step {step} loss {loss.item():.4f}")
del x, y, logits, loss
report("train")

model.eval()
all_logits, all_targets = [], []
with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
    for x, y in eval_loader:
        all_logits.append(model(x.contiguous(memory_format=torch.channels_last)).float())
        all_targets.append(y)
logits = torch.cat(all_logits)
targets = torch.cat(all_targets)
del all_logits, all_targets, x, y
report("eval")

top5 = logits.topk(5, dim=-1).indices
acc1 = (top5[:, 0] == targets).float().mean()
acc5 = (top5 == targets[:, None]).any(-1).float().mean()
confusion = torch.zeros(NUM_CLASSES, NUM_CLASSES, device=device, dtype=torch.long)
confusion.index_put_((targets, top5[:, 0]), torch.ones_like(targets), accumulate=True)
if device.type == "cuda":
    print(f"acc1 {acc1.item():.4f} acc5 {acc5.item():.4f} diag {confusion.diag().sum().item()}")
report("metrics")
