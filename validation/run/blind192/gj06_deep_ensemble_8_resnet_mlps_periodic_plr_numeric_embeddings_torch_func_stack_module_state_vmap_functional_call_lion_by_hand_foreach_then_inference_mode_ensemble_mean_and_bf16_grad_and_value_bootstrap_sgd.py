"""A deep ensemble of 8 tabular ResNet-MLPs trained together as one batched model with torch.func, the way
the TabM / "ensembles with vmap" recipes do it, for a 64-feature regression table.

Each member: periodic numeric embeddings (PLR, Gorishniy et al. 2022: x_j * 2 pi * c_j with 16 learned
frequencies per feature, cos and sin, a per-feature Linear(32 -> 24) written as an einsum, ReLU), flattened
to 1,536, Linear to 512, three residual blocks (LayerNorm, Linear 512 -> 1,024, ReLU, Dropout 0.1,
Linear 1,024 -> 512, Dropout 0.1) and a head (LayerNorm, ReLU, Linear -> 1). The 8 members are built as
nn.Modules, their parameters stacked with torch.func.stack_module_state, and the forward is
torch.func.vmap(functional_call) over the stacked parameters (randomness="different" for dropout), every
member seeing the same batch of 8,192 rows; MSE summed over members, loss.backward() into the stacked
leaves. Optimizer: Lion written by hand with torch._foreach ops (lr 1e-4, betas 0.9 / 0.99, decoupled
weight decay 0.1). fp32.

Phases: the first step; 4 more steps; ensemble prediction (mean and spread over members) of 65,536 rows in
chunks of 16,384 under torch.inference_mode, moved to the host; then 2 steps where every member gets its
own bootstrap resample of a 4,096-row batch: torch.func.vmap(torch.func.grad_and_value(loss)) over the
stacked parameters and the per-member batches under bf16 autocast, and a plain SGD update with
torch._foreach_add_. 4 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19206)
if SMALL:
    MEMBERS, B, STEPS, EVAL_ROWS, EVAL_CHUNK, BOOT_B = 2, 64, 1, 256, 128, 32
else:
    MEMBERS, B, STEPS, EVAL_ROWS, EVAL_CHUNK, BOOT_B = 8, 8192, 4, 65536, 16384, 4096
N_FEAT = 64
K = 16
D_EMB = 24
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class PLR(nn.Module):
    def __init__(self, n, k=K, d=D_EMB, sigma=0.1):
        super().__init__()
        self.freq = nn.Parameter(torch.randn(n, k) * sigma)
        self.weight = nn.Parameter(torch.randn(n, 2 * k, d) / math.sqrt(2 * k))
        self.bias = nn.Parameter(torch.zeros(n, d))

    def forward(self, x):
        v = 2 * math.pi * self.freq * x[..., None]
        v = torch.cat([torch.cos(v), torch.sin(v)], -1)
        return F.relu(torch.einsum("bnk,nkd->bnd", v, self.weight) + self.bias)


class Block(nn.Module):
    def __init__(self, d=512, d_hidden=1024, p=0.1):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return x + self.drop(self.fc2(self.drop(F.relu(self.fc1(self.norm(x))))))


class ResNetMLP(nn.Module):
    def __init__(self, n=N_FEAT, d=512, depth=3):
        super().__init__()
        self.emb = PLR(n)
        self.inp = nn.Linear(n * D_EMB, d)
        self.blocks = nn.Sequential(*[Block(d) for _ in range(depth)])
        self.head = nn.Sequential(nn.LayerNorm(d), nn.ReLU(), nn.Linear(d, 1))

    def forward(self, x):
        return self.head(self.blocks(self.inp(self.emb(x).flatten(1)))).squeeze(-1)


members = [ResNetMLP().to(device) for _ in range(MEMBERS)]
params, buffers = stack_module_state(members)
base = copy.deepcopy(members[0]).to("meta")
del members
plist = list(params.values())
print(f"ensemble params {sum(p.numel() for p in plist) / 1e6:.1f}M over {MEMBERS} members")


def fmodel(p, b, x):
    return functional_call(base, (p, b), (x,))


ens_train = vmap(fmodel, in_dims=(0, 0, None), randomness="different")
ens_eval = vmap(fmodel, in_dims=(0, 0, None))


def batch(n):
    x = torch.randn(n, N_FEAT, device=device)
    y = torch.sin(x[:, :4]).sum(1) + 0.1 * x[:, 4:8].pow(2).sum(1) + 0.05 * torch.randn(n, device=device)
    return x, y


lion_m = [torch.zeros_like(p) for p in plist]


@torch.no_grad()
def lion_step(lr=1e-4, b1=0.9, b2=0.99, wd=0.1):
    grads = [p.grad for p in plist]
    update = torch._foreach_mul(lion_m, b1)
    torch._foreach_add_(update, grads, alpha=1 - b1)
    update = [u.sign_() for u in update]
    torch._foreach_mul_(plist, 1 - lr * wd)
    torch._foreach_add_(plist, update, alpha=-lr)
    torch._foreach_lerp_(lion_m, grads, 1 - b2)


def train_step():
    x, y = batch(B)
    pred = ens_train(params, buffers, x)
    loss = F.mse_loss(pred, y.expand(MEMBERS, -1), reduction="none").mean(1).sum()
    for p in plist:
        p.grad = None
    loss.backward()
    lion_step()
    return loss.item() / MEMBERS


print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = train_step()
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

base.eval()
means, spreads = [], []
with torch.inference_mode():
    for _ in range(EVAL_ROWS // EVAL_CHUNK):
        x, _ = batch(EVAL_CHUNK)
        pred = ens_eval(params, buffers, x)
        means.append(pred.mean(0).cpu())
        spreads.append(pred.std(0).cpu())
means, spreads = torch.cat(means), torch.cat(spreads)
print(f"ensemble mean {means.mean():.4f} spread {spreads.mean():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

base.train()
detached = {k: v.detach() for k, v in params.items()}


def member_loss(p, b, x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        pred = fmodel(p, b, x)
    return F.mse_loss(pred.float(), y)


boot_grad = vmap(grad_and_value(member_loss), in_dims=(0, 0, 0, 0), randomness="different")
for step in range(2):
    x, y = batch(BOOT_B)
    idx = torch.randint(0, BOOT_B, (MEMBERS, BOOT_B), device=device)
    grads, losses = boot_grad(detached, buffers, x[idx], y[idx])
    with torch.no_grad():
        torch._foreach_add_(list(detached.values()), [grads[k] for k in detached], alpha=-1e-3)
    print(f"bootstrap step {step} mean loss {losses.mean().item():.4f}")
if device == "cuda":
    print(
        f"bootstrap allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
