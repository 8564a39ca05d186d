"""Lion (Chen et al. 2023) and LAMB (You et al. 2019) written by hand as torch.optim.Optimizer subclasses
with torch._foreach ops, over timm's vit_small_patch16_224 (random init, 1000 classes; timm's fused
attention is F.scaled_dot_product_attention without a mask).

Lion: update = sign(lerp(grad, exp_avg, beta1)), decoupled weight decay, exp_avg lerped towards the
gradient with beta2; the foreach lists are built per group. LAMB: Adam moments kept in bfloat16
(state dtype chosen by the optimizer), bias-corrected update plus weight decay, then a per-parameter
trust ratio ||w|| / ||update|| from torch._foreach_norm, applied with torch._foreach_mul_ and
_foreach_add_ (norms as 0-dim device tensors, torch.where for zero norms).

Phases: 5 Lion steps under bf16 autocast at batch 128 with clip_grad_norm_(foreach=True) and label
smoothing 0.1; inference_mode evaluation at batch 512 under bf16 autocast; Lion deleted, LAMB with bf16
states, timm's set_grad_checkpointing(True), 4 steps at batch 256. 3 phases."""

import timm
import torch
import torch.nn.functional as F
from torch.optim import Optimizer

torch.manual_seed(2262)
device = "cuda"


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class Lion(Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            ps = [p for p in group["params"] if p.grad is not None]
            if not ps:
                continue
            gs = [p.grad for p in ps]
            ms = []
            for p in ps:
                st = self.state[p]
                if "exp_avg" not in st:
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                ms.append(st["exp_avg"])
            b1, b2 = group["betas"]
            torch._foreach_mul_(ps, 1 - group["lr"] * group["weight_decay"])
            upd = torch._foreach_lerp(gs, ms, b1)
            torch._foreach_sign_(upd)
            torch._foreach_add_(ps, upd, alpha=-group["lr"])
            torch._foreach_lerp_(ms, gs, 1 - b2)


class LAMB(Optimizer):
    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.05, state_dtype=torch.bfloat16):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.state_dtype = state_dtype

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            ps = [p for p in group["params"] if p.grad is not None]
            if not ps:
                continue
            b1, b2 = group["betas"]
            ms, vs = [], []
            for p in ps:
                st = self.state[p]
                if "step" not in st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p, dtype=self.state_dtype)
                    st["exp_avg_sq"] = torch.zeros_like(p, dtype=self.state_dtype)
                st["step"] += 1
                ms.append(st["exp_avg"])
                vs.append(st["exp_avg_sq"])
            k = self.state[ps[0]]["step"]
            gs = [p.grad.to(self.state_dtype) for p in ps]
            torch._foreach_lerp_(ms, gs, 1 - b1)
            torch._foreach_mul_(vs, b2)
            torch._foreach_addcmul_(vs, gs, gs, value=1 - b2)
            m32 = torch._foreach_div([m.float() for m in ms], 1 - b1**k)
            den = torch._foreach_sqrt(torch._foreach_div([v.float() for v in vs], 1 - b2**k))
            torch._foreach_add_(den, group["eps"])
            upd = torch._foreach_div(m32, den)
            if group["weight_decay"]:
                torch._foreach_add_(upd, ps, alpha=group["weight_decay"])
            w_norm = torch._foreach_norm(ps)
            u_norm = torch._foreach_norm(upd)
            trust = [torch.where((w > 0) & (u > 0), w / u, torch.ones_like(w)) for w, u in zip(w_norm, u_norm)]
            torch._foreach_mul_(upd, trust)
            torch._foreach_add_(ps, upd, alpha=-group["lr"])


model = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=1000).to(device)
decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "pos_embed" not in n]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2 or "pos_embed" in n]
groups = [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]
opt = Lion(groups, lr=1e-4, weight_decay=1.0)

# Phase 1: Lion.
for step in range(5):
    x = torch.randn(128, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (128,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"lion step {step} loss {loss.item():.4f} gnorm {gn.item():.3f}")
report("lion train")

# Phase 2: evaluation.
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    x = torch.randn(512, 3, 224, 224, device=device)
    top5 = model(x).float().softmax(-1).topk(5, dim=-1)
print(f"eval top5 mean {top5.values.mean().item():.4f}")
del x, top5
report("eval")

# Phase 3: LAMB with bf16 states and gradient checkpointing.
model.train()
del opt
opt = LAMB(groups, lr=2e-3, weight_decay=0.05)
model.set_grad_checkpointing(True)
for step in range(4):
    x = torch.randn(256, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (256,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"lamb step {step} loss {loss.item():.4f}")
report("lamb train")
