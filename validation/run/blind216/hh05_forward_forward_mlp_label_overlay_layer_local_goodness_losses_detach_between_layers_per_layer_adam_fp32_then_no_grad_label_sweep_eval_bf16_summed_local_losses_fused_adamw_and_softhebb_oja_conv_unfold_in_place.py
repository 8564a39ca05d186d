"""Hinton's forward-forward algorithm (2022) and Hebbian learning, no backpropagation across layers.

Forward-forward: a 4-layer ReLU MLP 3072 -> 4 x 4096 on random CIFAR-sized vectors; the label is written
into the first 10 inputs as a one-hot (positive data: the true label, negative data: a random other label);
each layer normalises its input to unit length, and its goodness (mean squared activity) is pushed above a
threshold for positive and below it for negative data (softplus loss); each layer's output is detached
before the next layer, so every loss is layer-local.

Phases: 3 steps at 8192 positive + 8192 negative samples with one Adam per layer, each layer's loss
backward-ed and stepped before the next layer runs, fp32; evaluation under no_grad at batch 4096 by the
goodness of layers 2-4 summed for each of the 10 candidate labels; 3 steps under bf16 autocast with the four
layer-local losses summed into one backward and one fused AdamW; then empty_cache() and 5 steps of SoftHebb
(Moraitis et al. 2022)-style unsupervised Hebbian learning of a two-layer conv net (3 -> 96 5x5, pool,
96 -> 384 3x3) at batch 512: soft winner-take-all activations, Oja's rule dW = y x^T - (sum y^2) W from
F.unfold patches with torch.einsum, applied in place under no_grad. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2165)
device = "cuda" if torch.cuda.is_available() else "cpu"
IN, HIDDEN, LAYERS, CLASSES = 3072, (256 if SMALL else 4096), 4, 10
BATCH, EVAL_BATCH, HEBB_BATCH = (64, 32, 16) if SMALL else (8192, 4096, 512)
THETA = 2.0


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class FFLayer(nn.Linear):
    def forward(self, x):
        x = x / (x.norm(dim=1, keepdim=True) + 1e-4)
        return F.relu(super().forward(x))


def goodness(h):
    return h.square().mean(1)


def ff_loss(h, n_pos):
    g = goodness(h)
    return F.softplus(torch.cat([THETA - g[:n_pos], g[n_pos:] - THETA])).mean()


def overlay(x, labels):
    x = x.clone()
    x[:, :CLASSES] = F.one_hot(labels, CLASSES).to(x.dtype) * x.abs().max()
    return x


def make_batch(n):
    x = torch.randn(n, IN, device=device)
    y = torch.randint(0, CLASSES, (n,), device=device)
    wrong = (y + torch.randint(1, CLASSES, (n,), device=device)) % CLASSES
    return torch.cat([overlay(x, y), overlay(x, wrong)]), n


layers = nn.ModuleList(FFLayer(IN if i == 0 else HIDDEN, HIDDEN) for i in range(LAYERS)).to(device)
opts = [torch.optim.Adam(layer.parameters(), lr=3e-4) for layer in layers]

for it in range(3):
    h, n_pos = make_batch(BATCH)
    losses = []
    for layer, opt in zip(layers, opts):
        out = layer(h)
        loss = ff_loss(out, n_pos)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        h = out.detach()
    del h, out, loss
print(f"ff losses {[round(v, 4) for v in losses]}")
report("forward-forward per-layer adam")

with torch.no_grad():
    x = torch.randn(EVAL_BATCH, IN, device=device)
    y = torch.randint(0, CLASSES, (EVAL_BATCH,), device=device)
    scores = torch.zeros(EVAL_BATCH, CLASSES, device=device)
    for label in range(CLASSES):
        h = overlay(x, torch.full_like(y, label))
        for i, layer in enumerate(layers):
            h = layer(h)
            if i > 0:
                scores[:, label] += goodness(h)
    acc = (scores.argmax(1) == y).float().mean().item()
    del h
print(f"eval acc {acc:.4f}")
report("eval label sweep")

del opts
opt = torch.optim.AdamW(layers.parameters(), lr=3e-4, weight_decay=0.01, fused=device == "cuda")
for it in range(3):
    h, n_pos = make_batch(BATCH)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        total = 0
        for layer in layers:
            out = layer(h)
            total = total + ff_loss(out.float(), n_pos)
            h = out.detach()
    opt.zero_grad(set_to_none=True)
    total.backward()
    opt.step()
    del h, out
print(f"ff summed loss {total.item():.4f}")
report("forward-forward bf16 summed fused adamw")

# SoftHebb-style Hebbian convolutions, in place under no_grad
del opt, total
if device == "cuda":
    torch.cuda.empty_cache()
w1 = torch.randn(96, 3, 5, 5, device=device) * 0.1
w2 = torch.randn(384, 96, 3, 3, device=device) * 0.05
LR, TEMP = 0.01, 1.0


def hebb_update(w, x, padding):
    y = torch.softmax(F.conv2d(x, w, padding=padding) / TEMP, dim=1)  # soft WTA over channels
    patches = F.unfold(x, w.shape[-1], padding=padding)  # [B, C*k*k, P]
    yf = y.flatten(2)  # [B, O, P]
    hebb = torch.einsum("bop,bkp->ok", yf, patches)
    oja = yf.square().sum((0, 2))[:, None] * w.flatten(1)
    w.add_((LR / x.shape[0]) * (hebb - oja).view_as(w))
    return y


with torch.no_grad():
    for it in range(5):
        x = torch.randn(HEBB_BATCH, 3, 32, 32, device=device)
        y1 = hebb_update(w1, x, 2)
        x2 = F.max_pool2d(F.relu(F.conv2d(x, w1, padding=2)), 2)
        hebb_update(w2, x2, 1)
        del y1, x2
print(f"hebb weight norms {w1.norm().item():.3f} {w2.norm().item():.3f}")
report("softhebb oja in place")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
