"""A ViT-S/16 trained with random patch dropout on jagged nested tensors: each image keeps each of
its 196 patch tokens with probability 0.6 (a torch.rand mask drawn on the GPU, so every image keeps
a different number), the kept tokens are packed by a boolean index and wrapped with
torch.nested.nested_tensor_from_jagged (offsets from the per-image counts' cumsum, on the GPU),
each image's CLS token prepended by a second jagged concatenation; 12 pre-norm blocks of 384 wide,
6 heads, attention by F.scaled_dot_product_attention on the jagged q/k/v, the CLS token taken from
each image's first row; bf16 weights, AdamW (foreach), label smoothing 0.1, batch 96 of 224 x 224,
3 steps, then an evaluation of 128 images with every patch kept (dense) under inference_mode;
5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10707)
B, R, D, H, NL, BE = (4, 64, 48, 2, 2, 4) if SMALL else (96, 224, 384, 6, 12, 128)
P, KEEP, NCLS = 16, 0.6, 1000
N = (R // P) ** 2
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32


def attend(q, k, v):
    if q.is_cuda or not q.is_nested:
        return F.scaled_dot_product_attention(q, k, v)
    # CPU smoke run: torch 2.11 finds no jagged SDPA backend on a CPU-only build, so per image
    parts = [F.scaled_dot_product_attention(*t) for t in zip(q.unbind(), k.unbind(), v.unbind(), strict=True)]
    values = torch.cat([t.transpose(0, 1) for t in parts])
    return torch.nested.nested_tensor_from_jagged(values, q.offsets()).transpose(1, 2)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        q, k, v = self.qkv(self.n1(x)).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (H, D // H)).transpose(1, 2) for t in (q, k, v))
        x = x + self.proj(attend(q, k, v).transpose(1, 2).flatten(-2))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, P, P)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(1, N, D) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(NL))
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, NCLS)

    def forward(self, img, keep_p=None):
        tok = self.patch(img).flatten(2).transpose(1, 2) + self.pos
        b = tok.shape[0]
        if keep_p is None:
            x = torch.cat([self.cls.expand(b, -1, -1), tok], dim=1)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x[:, 0]))
        keep = torch.rand(b, N, device=img.device) < keep_p
        counts = keep.sum(1)
        # one CLS row in front of each image's kept tokens: positions in the packed values
        lengths = counts + 1
        offsets = F.pad(lengths.cumsum(0), (1, 0))
        values = tok.new_empty(int(lengths.sum()), D)
        first = offsets[:-1]
        is_cls = torch.zeros(values.shape[0], dtype=torch.bool, device=img.device)
        is_cls[first] = True
        values = values.index_put((first,), self.cls[0, 0].expand(b, -1))
        values = values.masked_scatter(~is_cls[:, None], tok[keep])
        x = torch.nested.nested_tensor_from_jagged(values, offsets)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x.values()[first]))


model = ViT().to(device, dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    img = torch.randn(B, 3, R, R, device=device, dtype=dtype)
    labels = torch.randint(0, NCLS, (B,), device=device)
    loss = F.cross_entropy(model(img, KEEP).float(), labels, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del img, labels, loss
model.eval()
with torch.inference_mode():
    pred = model(torch.randn(BE, 3, R, R, device=device, dtype=dtype)).argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
