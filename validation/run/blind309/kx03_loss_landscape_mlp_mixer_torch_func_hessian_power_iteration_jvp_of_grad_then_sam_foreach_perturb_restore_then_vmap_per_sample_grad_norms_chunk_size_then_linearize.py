"""Loss-landscape diagnostics for a small MLP-Mixer on CIFAR-sized random images, written with torch.func:
sharpness by Hessian power iteration, sharpness-aware minimisation, per-sample gradient norms and a
linearised (NTK) model, the recipes of the "flatness" papers.

Mixer: 32 x 32 x 3 images, 4 x 4 patches (64 tokens, by `unfold`), width 256, token MLP 256, channel MLP
1,024, 8 layers, 10 classes (about 4.5 M parameters). Phases: (1) 8 SGD-momentum steps at batch 256;
(2) the top Hessian eigenvalue on a batch of 256 by 10 power-iteration steps, each a forward-over-reverse
Hessian-vector product `jvp(grad(loss_fn), (params,), (v,))` over `functional_call` with the parameter
dict, the tangent normalised by `torch._foreach_norm`; (3) 4 SAM steps: first gradient, `_foreach_add_` of
rho * g / ||g|| into the weights, second gradient, the perturbation subtracted, SGD step; (4) per-sample
gradient norms of 256 examples by `vmap(grad(loss_one), in_dims=(None, 0, 0), chunk_size=64)`;
(5) `torch.func.linearize` of the logits in the parameters at a batch of 128, the linearised model's
output for 3 random parameter directions (`jvp_fn(tangent)`), compared with the exact jvp."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, jvp, linearize, vmap

torch.manual_seed(30903)
device = "cuda" if torch.cuda.is_available() else "cpu"
PATCH, WIDTH, TOK_H, CH_H, LAYERS, CLASSES = 4, 256, 256, 1024, 8, 10
TOKENS = (32 // PATCH) ** 2


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class MixerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.tok = nn.Sequential(nn.Linear(TOKENS, TOK_H), nn.GELU(), nn.Linear(TOK_H, TOKENS))
        self.ch = nn.Sequential(nn.Linear(WIDTH, CH_H), nn.GELU(), nn.Linear(CH_H, WIDTH))

    def forward(self, x):
        x = x + self.tok(self.ln1(x).transpose(-1, -2)).transpose(-1, -2)
        return x + self.ch(self.ln2(x))


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3 * PATCH * PATCH, WIDTH)
        self.blocks = nn.Sequential(*[MixerBlock() for _ in range(LAYERS)])
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, img):
        patches = F.unfold(img, PATCH, stride=PATCH).transpose(1, 2)
        return self.head(self.ln(self.blocks(self.embed(patches))).mean(1))


model = Mixer().to(device)
images = torch.randn(4096, 3, 32, 32, device=device)
labels = torch.randint(0, CLASSES, (4096,), device=device)

# Phase 1: plain training.
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
for step in range(8):
    sl = slice(step * 256, (step + 1) * 256)
    loss = F.cross_entropy(model(images[sl]), labels[sl])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("train loss", loss.item())
del loss
report("phase 1 sgd")

# Phase 2: Hessian power iteration, forward-over-reverse.
names = [n for n, _ in model.named_parameters()]
params = {n: p.detach() for n, p in model.named_parameters()}
xb, yb = images[:256], labels[:256]


def loss_fn(p):
    return F.cross_entropy(functional_call(model, p, (xb,)), yb)


def hvp(v):
    return jvp(grad(loss_fn), (params,), (v,))[1]


v = {n: torch.randn_like(p) for n, p in params.items()}
for _ in range(10):
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(list(v.values()))))
    v = {n: t / norm for n, t in v.items()}
    hv = hvp(v)
    eig = sum((hv[n] * v[n]).sum() for n in names)
    v = hv
print("top hessian eigenvalue", eig.item())
del v, hv
report("phase 2 hessian power iteration")

# Phase 3: SAM.
rho = 0.05
weights = list(model.parameters())
for step in range(4):
    sl = slice(2048 + step * 256, 2048 + (step + 1) * 256)
    F.cross_entropy(model(images[sl]), labels[sl]).backward()
    grads = [p.grad for p in weights]
    gnorm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    eps = torch._foreach_mul(grads, rho / (gnorm + 1e-12))
    with torch.no_grad():
        torch._foreach_add_(weights, eps)
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(images[sl]), labels[sl])
    loss.backward()
    with torch.no_grad():
        torch._foreach_sub_(weights, eps)
    opt.step()
    opt.zero_grad(set_to_none=True)
    del grads, eps
print("sam loss", loss.item())
del loss
report("phase 3 sam")

# Phase 4: per-sample gradient norms.
params = {n: p.detach() for n, p in model.named_parameters()}


def loss_one(p, x, y):
    return F.cross_entropy(functional_call(model, p, (x[None],)), y[None])


per_sample = vmap(grad(loss_one), in_dims=(None, 0, 0), chunk_size=64)(params, images[:256], labels[:256])
norms = torch.linalg.vector_norm(
    torch.stack([g.flatten(1).norm(dim=1) for g in per_sample.values()], 1), dim=1
)
print("per-sample grad norm mean", norms.mean().item())
del per_sample
report("phase 4 per-sample gradients")

# Phase 5: the linearised model.
xl = images[:128]
logits, jvp_fn = linearize(lambda p: functional_call(model, p, (xl,)), params)
for k in range(3):
    tangent = {n: torch.randn_like(p) * 1e-3 for n, p in params.items()}
    lin = jvp_fn(tangent)
    exact = jvp(lambda p: functional_call(model, p, (xl,)), (params,), (tangent,))[1]
    print("direction", k, "max |lin - exact|", (lin - exact).abs().max().item())
del jvp_fn, lin, exact
report("phase 5 linearize")
