"""A device-agnostic training loop written against PyTorch's generic accelerator API, as recent recipes
are (no `torch.cuda` call in the program): `torch.accelerator.current_accelerator()`,
`torch.get_device_module(dev)`, a generic `torch.Stream` for host-to-device prefetch of pinned batches with
`torch.Event` ordering and `record_stream`, `torch.amp.autocast(dev.type, torch.bfloat16)`, AdamW (foreach),
and memory read through `torch.accelerator.memory_*`. The model: an nn.TransformerEncoder classifier
(6 layers, d 768, 12 heads, ff 3072, batch_first, norm_first, GELU), vocab 30522, 256 tokens, batch 32,
2 classes of 3 tasks (three heads). Three phases of two steps each, the last with
`torch.accelerator.synchronize()` and `empty_cache` through the device module between steps.

No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2494)
dev = torch.accelerator.current_accelerator()
mod = torch.get_device_module(dev)
V, D, T, B = 30522, 768, 256, 32


def report(tag):
    m = torch.accelerator
    print(f"{tag}: peak {m.max_memory_allocated()} alloc {m.memory_allocated()} reserved {m.memory_reserved()}")
    m.reset_peak_memory_stats()


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(T, D))
        layer = nn.TransformerEncoderLayer(D, 12, 3072, 0.1, "gelu", batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
        self.heads = nn.ModuleList(nn.Linear(D, 2) for _ in range(3))

    def forward(self, ids):
        h = self.enc(self.emb(ids) + self.pos).mean(1)
        return [head(h) for head in self.heads]


model = Classifier().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
host = [
    (torch.randint(0, V, (B, T)).pin_memory(), torch.randint(0, 2, (3, B)).pin_memory()) for _ in range(6)
]
side = torch.Stream(device=dev)
report("setup")


def prefetch(i):
    with side:
        ids = host[i][0].to(dev, non_blocking=True)
        lab = host[i][1].to(dev, non_blocking=True)
    ev = torch.Event(device=dev)
    ev.record(side)
    return ids, lab, ev


def step(batch):
    ids, lab, ev = batch
    torch.accelerator.current_stream().wait_event(ev)
    ids.record_stream(torch.accelerator.current_stream())
    lab.record_stream(torch.accelerator.current_stream())
    with torch.amp.autocast(dev.type, dtype=torch.bfloat16):
        outs = model(ids)
    loss = sum(F.cross_entropy(o.float(), lab[k]) for k, o in enumerate(outs))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


nxt = prefetch(0)
for i in range(2):
    cur, nxt = nxt, prefetch(i + 1)
    step(cur)
    del cur
report("train_prefetch_bf16")

for i in range(2, 4):
    cur, nxt = nxt, prefetch(i + 1)
    step(cur)
    del cur
report("train_prefetch_bf16_more")

for i in range(4, 6):
    cur = nxt
    nxt = prefetch(i + 1) if i + 1 < 6 else None
    step(cur)
    del cur
    torch.accelerator.synchronize()
    mod.empty_cache()
report("train_sync_empty_cache")
