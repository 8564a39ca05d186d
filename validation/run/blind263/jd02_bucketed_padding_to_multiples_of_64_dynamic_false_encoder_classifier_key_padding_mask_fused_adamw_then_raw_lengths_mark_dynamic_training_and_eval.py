"""Bucketing against raw lengths in a compiled training loop: a 6-layer encoder classifier (d 512, 8 heads
through SDPA with a boolean key-padding mask built inside the model from per-sample lengths, vocab 30522,
mean pooling over the valid tokens, 8 classes; fp32 weights, bf16 autocast, fused AdamW), batch 16.
First `torch.compile(model, dynamic=False)` over batches padded up to multiples of 64 (longest 70, 130, 100,
190, 60, 150 -> 128, 192, 128, 192, 64, 192: one static graph per bucket, three in all); then the same model
compiled again (default settings) over raw lengths (70, 130, 100, 190) whose sequence dimension is marked
`torch._dynamo.mark_dynamic(ids, 1)`: one dynamic graph (Inductor's SDPA lowering guards the mask's row stride
not a multiple of 8, which every raw length here satisfies; with `min=`/`max=` that guard violates the range
and dynamo raises); then a no_grad evaluation at raw lengths 90, 250 and 170 (marked the same way).

Per-sample lengths are set by the program (no value-dependent sizes). 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2632)
V, D, H, L, B, C = 30522, 512, 8, 6, 16, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, keep):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        x = self.n1(x + self.proj(a.transpose(1, 2).reshape(b, t, D)))
        return self.n2(x + self.ff(x))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D, padding_idx=0)
        self.pos = nn.Embedding(512, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.cls = nn.Linear(D, C)

    def forward(self, ids, lengths):
        t = ids.shape[1]
        keep = torch.arange(t, device=ids.device)[None, :] < lengths[:, None]
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        for layer in self.layers:
            x = layer(x, keep)
        w = keep.unsqueeze(-1).to(x.dtype)
        return self.cls((x * w).sum(1) / w.sum(1))


model = Classifier().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, fused=True)
report("setup")


def batch(longest, pad_to):
    # lengths from longest down to about half of it, set by the program
    lengths = torch.tensor([longest - (i * longest) // (2 * B) for i in range(B)], device="cuda")
    ids = torch.randint(1, V, (B, pad_to), device="cuda")
    ids = ids.masked_fill(torch.arange(pad_to, device="cuda")[None, :] >= lengths[:, None], 0)
    labels = torch.randint(0, C, (B,), device="cuda")
    return ids, lengths, labels


def step(fn, ids, lengths, labels):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(fn(ids, lengths), labels)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


bucketed = torch.compile(model, dynamic=False)
for longest in (70, 130, 100, 190, 60, 150):
    step(bucketed, *batch(longest, -(-longest // 64) * 64))
report("train_bucketed_64_128_192_dynamic_false")

raw = torch.compile(model)
for longest in (70, 130, 100, 190):
    ids, lengths, labels = batch(longest, longest)
    torch._dynamo.mark_dynamic(ids, 1)
    step(raw, ids, lengths, labels)
report("train_raw_lengths_mark_dynamic")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for longest in (90, 250, 170):
        ids, lengths, _ = batch(longest, longest)
        torch._dynamo.mark_dynamic(ids, 1)
        preds = raw(ids, lengths).argmax(-1)
        del preds
report("eval_raw_lengths_no_grad")
