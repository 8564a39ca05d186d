"""Schedule-Free AdamW (Defazio et al. 2024) written by hand as a torch.optim.Optimizer subclass in the
style of facebookresearch/schedule_free's AdamWScheduleFree: the parameters hold y (the interpolation
where gradients are taken), the state keeps z and exp_avg_sq, and x is never stored; optimizer.eval()
moves the parameters to x with torch._foreach_lerp_(params, z, 1 - 1/beta1) and optimizer.train()
moves them back with weight 1 - beta1. The step (foreach, with warmup in the lr, ckp1 = lr^2 / sum lr^2):
with u = grad / (sqrt(v) + eps) + wd * y, y <- lerp(y, z, ckp1) + lr * (beta1 * (1 - ckp1) - 1) * u and
z <- z - lr * u.

Model: torchvision resnet50 (weights None) in channels_last. Phases: 5 Schedule-Free AdamW steps under bf16
autocast at batch 96 on 224 x 224; optimizer.eval() and inference_mode evaluation at batch 256 at x;
optimizer.train(), the optimizer replaced by a Schedule-Free SGD (momentum-free, z only) with fp16 autocast
and a GradScaler, 4 steps at batch 128; empty_cache() and a last inference_mode pass at batch 64 on
320 x 320 after optimizer.eval(). 4 phases."""

import math

import torch
import torch.nn.functional as F
import torchvision
from torch.optim import Optimizer

torch.manual_seed(2264)
device = "cuda"


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class AdamWScheduleFree(Optimizer):
    def __init__(self, params, lr=2.5e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05, warmup_steps=3):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      warmup_steps=warmup_steps, k=0, weight_sum=0.0, train_mode=True))

    @torch.no_grad()
    def eval(self):
        for group in self.param_groups:
            if group["train_mode"]:
                ps = [p for p in group["params"] if "z" in self.state[p]]
                if ps:
                    torch._foreach_lerp_(ps, [self.state[p]["z"] for p in ps], 1 - 1 / group["betas"][0])
                group["train_mode"] = False

    @torch.no_grad()
    def train(self):
        for group in self.param_groups:
            if not group["train_mode"]:
                ps = [p for p in group["params"] if "z" in self.state[p]]
                if ps:
                    torch._foreach_lerp_(ps, [self.state[p]["z"] for p in ps], 1 - group["betas"][0])
                group["train_mode"] = True

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            k = group["k"]
            warm = min(1.0, (k + 1) / group["warmup_steps"])
            bc2 = 1 - b2 ** (k + 1)
            lr = group["lr"] * warm * math.sqrt(bc2)
            weight = lr**2
            group["weight_sum"] += weight
            ckp1 = weight / group["weight_sum"]
            ps = [p for p in group["params"] if p.grad is not None]
            for p in ps:
                st = self.state[p]
                if "z" not in st:
                    st["z"] = p.detach().clone(memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            gs = [p.grad for p in ps]
            zs = [self.state[p]["z"] for p in ps]
            vs = [self.state[p]["exp_avg_sq"] for p in ps]
            torch._foreach_mul_(vs, b2)
            torch._foreach_addcmul_(vs, gs, gs, value=1 - b2)
            den = torch._foreach_sqrt(vs)
            torch._foreach_add_(den, group["eps"])
            gn = torch._foreach_div(gs, den)
            if group["weight_decay"]:
                torch._foreach_add_(gn, ps, alpha=group["weight_decay"])
            # y <- (1 - ckp1) * y + ckp1 * z, then y <- y + lr * (b1 * (1 - ckp1) - 1) * grad_normalized
            torch._foreach_lerp_(ps, zs, ckp1)
            torch._foreach_add_(ps, gn, alpha=lr * (b1 * (1 - ckp1) - 1))
            torch._foreach_sub_(zs, gn, alpha=lr)
            group["k"] = k + 1


class SGDScheduleFree(AdamWScheduleFree):
    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1 = group["betas"][0]
            k = group["k"]
            lr = group["lr"] * min(1.0, (k + 1) / group["warmup_steps"])
            weight = lr**2
            group["weight_sum"] += weight
            ckp1 = weight / group["weight_sum"]
            ps = [p for p in group["params"] if p.grad is not None]
            for p in ps:
                if "z" not in self.state[p]:
                    self.state[p]["z"] = p.detach().clone(memory_format=torch.preserve_format)
            gs = [p.grad for p in ps]
            zs = [self.state[p]["z"] for p in ps]
            if group["weight_decay"]:
                gs = torch._foreach_add(gs, ps, alpha=group["weight_decay"])
            torch._foreach_lerp_(ps, zs, ckp1)
            torch._foreach_add_(ps, gs, alpha=lr * (b1 * (1 - ckp1) - 1))
            torch._foreach_sub_(zs, gs, alpha=lr)
            group["k"] = k + 1


model = torchvision.models.resnet50(weights=None).to(device, memory_format=torch.channels_last)
opt = AdamWScheduleFree(model.parameters())
model.train()
opt.train()
for step in range(5):
    x = torch.randn(96, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (96,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"sf-adamw step {step} loss {loss.item():.4f}")
report("schedule-free adamw")

model.eval()
opt.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    x = torch.randn(256, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last)
    p = model(x).float().softmax(-1)
print(f"eval max prob {p.max().item():.4f}")
del x, p
report("eval at x")

model.train()
opt.train()
del opt
opt = SGDScheduleFree(model.parameters(), lr=0.1, betas=(0.9, 0.0), weight_decay=5e-5, warmup_steps=2)
scaler = torch.amp.GradScaler("cuda")
for step in range(4):
    x = torch.randn(128, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (128,), device=device)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"sf-sgd step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
report("schedule-free sgd fp16")

torch.cuda.empty_cache()
model.eval()
opt.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    x = torch.randn(64, 3, 320, 320, device=device).contiguous(memory_format=torch.channels_last)
    out = model(x)
print(f"final logits norm {out.float().norm().item():.2f}")
report("eval 320")
