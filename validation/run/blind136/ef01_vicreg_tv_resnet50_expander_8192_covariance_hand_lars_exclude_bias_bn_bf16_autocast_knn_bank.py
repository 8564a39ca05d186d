"""VICReg (written after facebookresearch/vicreg's main_vicreg.py): a torchvision ResNet-50 trunk
(fc replaced by Identity) and the 2,048-8,192-8,192-8,192 expander (Linear + BatchNorm1d + ReLU,
last Linear without bias), two views of batch 128 at 224, bf16 autocast with the loss in fp32:
the invariance term (mse_loss), the variance term (hinge on the std of each of the 8,192 features)
and the covariance term (the 8,192 x 8,192 covariance of each view, its off-diagonal by the
flatten()[:-1].view(n - 1, n + 1)[:, 1:] trick, squared and summed); the repository's LARS written
by hand (biases and batch-norm weights kept out of the decay and of the trust ratio, momentum
buffer by `mu.mul_(m).add_(dp)`), warm-up cosine learning rate; 3 steps; then the trunk's
embeddings of 2,048 images at batch 512 under inference_mode into a normalised bank and a
20-nearest-neighbour vote of 512 queries; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13601)
B, IMG, MLP, N_BANK, EB = (4, 64, 256, 32, 16) if SMALL else (128, 224, 8192, 2048, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


def Projector(embedding, mlp):
    f = [embedding, mlp, mlp, mlp]
    layers = []
    for i in range(len(f) - 2):
        layers.append(nn.Linear(f[i], f[i + 1]))
        layers.append(nn.BatchNorm1d(f[i + 1]))
        layers.append(nn.ReLU(True))
    layers.append(nn.Linear(f[-2], f[-1], bias=False))
    return nn.Sequential(*layers)


class VICReg(nn.Module):
    def __init__(self, mlp):
        super().__init__()
        self.num_features = mlp
        self.backbone = torchvision.models.resnet50(zero_init_residual=True)
        self.embedding = self.backbone.fc.in_features
        self.backbone.fc = nn.Identity()
        self.projector = Projector(self.embedding, mlp)

    def forward(self, x, y):
        x = self.projector(self.backbone(x))
        y = self.projector(self.backbone(y))
        x, y = x.float(), y.float()
        repr_loss = F.mse_loss(x, y)
        x = x - x.mean(dim=0)
        y = y - y.mean(dim=0)
        std_x = torch.sqrt(x.var(dim=0) + 0.0001)
        std_y = torch.sqrt(y.var(dim=0) + 0.0001)
        std_loss = torch.mean(F.relu(1 - std_x)) / 2 + torch.mean(F.relu(1 - std_y)) / 2
        cov_x = (x.T @ x) / (x.shape[0] - 1)
        cov_y = (y.T @ y) / (y.shape[0] - 1)
        cov_loss = off_diagonal(cov_x).pow_(2).sum().div(self.num_features) + off_diagonal(cov_y).pow_(
            2
        ).sum().div(self.num_features)
        return 25.0 * repr_loss + 25.0 * std_loss + 1.0 * cov_loss


def exclude_bias_and_norm(p):
    return p.ndim == 1


class LARS(torch.optim.Optimizer):
    def __init__(
        self,
        params,
        lr,
        weight_decay=0,
        momentum=0.9,
        eta=0.001,
        weight_decay_filter=None,
        lars_adaptation_filter=None,
    ):
        defaults = dict(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            eta=eta,
            weight_decay_filter=weight_decay_filter,
            lars_adaptation_filter=lars_adaptation_filter,
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                dp = p.grad
                if dp is None:
                    continue
                if g["weight_decay_filter"] is None or not g["weight_decay_filter"](p):
                    dp = dp.add(p, alpha=g["weight_decay"])
                if g["lars_adaptation_filter"] is None or not g["lars_adaptation_filter"](p):
                    param_norm = torch.norm(p)
                    update_norm = torch.norm(dp)
                    one = torch.ones_like(param_norm)
                    q = torch.where(
                        param_norm > 0.0,
                        torch.where(update_norm > 0, (g["eta"] * param_norm / update_norm), one),
                        one,
                    )
                    dp = dp.mul(q)
                param_state = self.state[p]
                if "mu" not in param_state:
                    param_state["mu"] = torch.zeros_like(p)
                mu = param_state["mu"]
                mu.mul_(g["momentum"]).add_(dp)
                p.add_(mu, alpha=-g["lr"])


model = VICReg(MLP).to(device)
optimizer = LARS(
    model.parameters(),
    lr=0,
    weight_decay=1e-6,
    weight_decay_filter=exclude_bias_and_norm,
    lars_adaptation_filter=exclude_bias_and_norm,
)
mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def adjust_learning_rate(step, warmup=10, total=100, base_lr=0.2 * B * 2 / 256):
    if step < warmup:
        lr = base_lr * step / warmup
    else:
        q = 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
        lr = base_lr * q + base_lr * 0.001 * (1 - q)
    for g in optimizer.param_groups:
        g["lr"] = lr
    return lr


model.train()
for step in range(3):
    x = (torch.rand(B, 3, IMG, IMG, device=device) - mean) / std
    y = (torch.rand(B, 3, IMG, IMG, device=device) - mean) / std
    lr = adjust_learning_rate(step + 1)
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = model.forward(x, y)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} lr {lr:.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
del x, y, loss
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    bank, labels = [], torch.randint(0, 100, (N_BANK,), device=device)
    for _i in range(0, N_BANK, EB):
        xb = (torch.rand(EB, 3, IMG, IMG, device=device) - mean) / std
        bank.append(F.normalize(model.backbone(xb).float(), dim=1))
    bank = torch.cat(bank).t().contiguous()
    q = F.normalize(model.backbone((torch.rand(EB, 3, IMG, IMG, device=device) - mean) / std).float(), dim=1)
    sim = q @ bank
    w, idx = sim.topk(20, dim=-1)
    votes = torch.zeros(EB, 100, device=device).scatter_add_(1, labels[idx], (w / 0.07).exp())
    pred = votes.argmax(-1)
if device == "cuda":
    print(
        f"knn {pred.float().mean().item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
