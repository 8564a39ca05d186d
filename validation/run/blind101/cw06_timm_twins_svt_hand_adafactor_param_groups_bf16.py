"""timm Twins-SVT-Small (locally-grouped and global sub-sampled attention, depthwise-conv position
generators) trained with a hand-written Adafactor: factored second moments (row and column means of
the squared gradient, kept as two vectors per matrix, a full second moment for vectors), the update
divided by its RMS clipped at 1, decoupled weight decay only on the matrices (two parameter groups),
beta2 decaying as 1 - t^-0.8, written with per-parameter tensor ops under torch.no_grad; bf16
autocast with fp32 weights, batch 64 of 224 x 224, label smoothing 0.1, a linear warm-up factor, 3
steps, then an inference_mode evaluation of 128 images; 4 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10106)
B, R, STEPS = (2, 64, 2) if SMALL else (64, 224, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"


class HandAdafactor:
    def __init__(self, groups, lr=1e-3, eps=(1e-30, 1e-3), clip=1.0):
        self.groups, self.lr, self.eps, self.clip = groups, lr, eps, clip
        self.state, self.t = {}, 0

    @torch.no_grad()
    def step(self, scale=1.0):
        self.t += 1
        beta2 = 1.0 - self.t**-0.8
        for group in self.groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                sq = g * g + self.eps[0]
                st = self.state.setdefault(p, {})
                if p.dim() >= 2:
                    rows = sq.mean(dim=-1)
                    cols = sq.mean(dim=-2)
                    if "r" not in st:
                        st["r"], st["c"] = torch.zeros_like(rows), torch.zeros_like(cols)
                    st["r"].mul_(beta2).add_(rows, alpha=1 - beta2)
                    st["c"].mul_(beta2).add_(cols, alpha=1 - beta2)
                    r_factor = (st["r"] / st["r"].mean(dim=-1, keepdim=True)).rsqrt().unsqueeze(-1)
                    c_factor = st["c"].unsqueeze(-2).rsqrt()
                    update = g * r_factor * c_factor
                else:
                    if "v" not in st:
                        st["v"] = torch.zeros_like(g)
                    st["v"].mul_(beta2).add_(sq, alpha=1 - beta2)
                    update = g * st["v"].rsqrt()
                rms = update.pow(2).mean().sqrt()
                update.div_((rms / self.clip).clamp_min(1.0))
                lr = self.lr * scale * max(self.eps[1], p.pow(2).mean().sqrt().item())
                if group["weight_decay"]:
                    p.mul_(1 - self.lr * scale * group["weight_decay"])
                p.add_(update, alpha=-lr)

    def zero_grad(self):
        for group in self.groups:
            for p in group["params"]:
                p.grad = None


model = timm.create_model("twins_svt_small", num_classes=100, drop_path_rate=0.1).to(device)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = HandAdafactor([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}])
warmup = [min(1.0, (s + 1) / 10) for s in range(STEPS)]
dtype = torch.bfloat16 if device == "cuda" else torch.float32
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, 100, (B,), device=device)
    with torch.autocast(device, dtype=dtype, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    opt.step(warmup[step])
    opt.zero_grad()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=dtype, enabled=device == "cuda"):
    x = torch.randn(2 * B, 3, R, R, device=device)
    top1 = model(x).argmax(-1)
if device == "cuda":
    print(
        f"eval {top1.bincount().max().item()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
