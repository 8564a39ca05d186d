"""Schedule-free AdamW written from facebookresearch/schedule_free's reference AdamWScheduleFree
(foreach path: the parameters hold y, the state holds z and exp_avg_sq; each step squares into the
second moment by `_foreach_addcmul_`, normalises the gradient in place by `_foreach_sqrt` + eps,
adds the decay, `_foreach_lerp_` y toward z by ckp1 and steps y and z; warm-up 5 steps, the
weight_sum of lr^2 kept in the group), with its train()/eval() swap (eval moves the parameters to
x by lerp_ toward z) around a timm ViT-S/16 with 4 register tokens, no class token, average
pooling, drop-path 0.1 (built from VisionTransformer's constructor), bf16 autocast, batch 256 at
224; 2 steps and an evaluation at batch 512 under no_grad in eval mode; then the last 2 blocks,
the final norm and the head fine-tuned with Lion (lucidrains' lion-pytorch step, for-loop, sign of
the interpolated momentum, decoupled decay) while the rest is frozen, 2 steps; 6 phases."""

import math
import os

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13204)
B, IMG, DIM, DEPTH, HEADS = (4, 64, 96, 4, 2) if SMALL else (256, 224, 384, 12, 6)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class AdamWScheduleFree(torch.optim.Optimizer):
    def __init__(
        self,
        params,
        lr=0.0025,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0.05,
        warmup_steps=5,
        r=0.0,
        weight_lr_power=2.0,
    ):
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            r=r,
            k=0,
            warmup_steps=warmup_steps,
            train_mode=False,
            weight_sum=0.0,
            lr_max=-1.0,
            scheduled_lr=0.0,
            weight_lr_power=weight_lr_power,
            weight_decay=weight_decay,
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def eval(self):
        for group in self.param_groups:
            if group["train_mode"]:
                beta1, _ = group["betas"]
                for p in group["params"]:
                    state = self.state[p]
                    if "z" in state:
                        p.lerp_(end=state["z"].to(p.device), weight=1 - 1 / beta1)
                group["train_mode"] = False

    @torch.no_grad()
    def train(self):
        for group in self.param_groups:
            if not group["train_mode"]:
                beta1, _ = group["betas"]
                for p in group["params"]:
                    state = self.state[p]
                    if "z" in state:
                        p.lerp_(end=state["z"].to(p.device), weight=1 - beta1)
                group["train_mode"] = True

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            eps, decay, k, warmup = group["eps"], group["weight_decay"], group["k"], group["warmup_steps"]
            beta1, beta2 = group["betas"]
            sched = (k + 1) / warmup if k < warmup else 1.0
            lr = group["lr"] * sched * math.sqrt(1 - beta2 ** (k + 1))
            group["scheduled_lr"] = lr
            lr_max = group["lr_max"] = max(lr, group["lr_max"])
            weight = (k + 1) ** group["r"] * lr_max ** group["weight_lr_power"]
            weight_sum = group["weight_sum"] = group["weight_sum"] + weight
            ckp1 = weight / weight_sum if weight_sum != 0 else 0
            active = [p for p in group["params"] if p.grad is not None]
            for p in active:
                if "z" not in self.state[p]:
                    self.state[p]["z"] = torch.clone(p, memory_format=torch.preserve_format)
                    self.state[p]["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if active:
                y, grad, exp_avg_sq, z = zip(
                    *[(p, p.grad, self.state[p]["exp_avg_sq"], self.state[p]["z"]) for p in active],
                    strict=True,
                )
                torch._foreach_mul_(exp_avg_sq, beta2)
                torch._foreach_addcmul_(exp_avg_sq, grad, grad, value=1 - beta2)
                denom = torch._foreach_sqrt(exp_avg_sq)
                torch._foreach_add_(denom, eps)
                torch._foreach_div_(grad, denom)
                torch._foreach_add_(grad, y, alpha=decay)
                torch._foreach_lerp_(y, z, weight=ckp1)
                torch._foreach_add_(y, grad, alpha=lr * (beta1 * (1 - ckp1) - 1))
                torch._foreach_sub_(z, grad, alpha=lr)
            group["k"] = k + 1


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.1):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, wd, (beta1, beta2) = group["lr"], group["weight_decay"], group["betas"]
            for p in filter(lambda p: p.grad is not None, group["params"]):
                p.data.mul_(1 - lr * wd)
                grad, state = p.grad, self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                update = exp_avg.clone().mul_(beta1).add(grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-lr)
                exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)


model = VisionTransformer(
    img_size=IMG,
    patch_size=16,
    embed_dim=DIM,
    depth=DEPTH,
    num_heads=HEADS,
    num_classes=1000,
    class_token=False,
    global_pool="avg",
    reg_tokens=4,
    no_embed_class=True,
    drop_path_rate=0.1,
).to(device)
decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "pos_embed" not in n]
no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "pos_embed" in n]
opt = AdamWScheduleFree([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}])
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(optimizer, step, tag):
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"{tag} step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model.train()
opt.train()
for step in range(2):
    train_step(opt, step, "schedule-free")

model.eval()
opt.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    x = torch.randn(2 * B, 3, IMG, IMG, device=device)
    top5 = model(x).float().topk(5, -1).indices
if device == "cuda":
    print(
        f"eval top5 {tuple(top5.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

for p in model.parameters():
    p.requires_grad_(False)
tuned = list(model.blocks[-2:].parameters()) + list(model.norm.parameters()) + list(model.head.parameters())
for p in tuned:
    p.requires_grad_(True)
lion = Lion(tuned, lr=3e-5, weight_decay=0.3)
model.train()
for step in range(2):
    train_step(lion, step, "lion")
