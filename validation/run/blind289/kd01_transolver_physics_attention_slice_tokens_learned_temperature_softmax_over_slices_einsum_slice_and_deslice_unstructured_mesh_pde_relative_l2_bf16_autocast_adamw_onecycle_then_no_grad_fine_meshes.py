"""Transolver (Wu et al., ICML 2024, "Transolver: A Fast Transformer Solver for PDEs on General Geometries")
written by hand as its reference code (thuml/Transolver, `Physics_Attention_Irregular_Mesh`) does, on a
synthetic steady-state problem over unstructured 2-D meshes: each sample is a randomly deformed domain of
N scattered mesh points (positions plus a boundary-distance and a conductivity input), the target a smooth
field computed from them. Physics-Attention: x is projected per head twice (`in_project_x`, `in_project_fx`),
each point's slice weights are `softmax(in_project_slice(x_mid) / temperature)` over 64 slices with a learned
per-head temperature (orthogonal init of the slice projection); slice tokens are the weight-normalised
`einsum('bhnc,bhng->bhgc')` of point features, attention (plain softmax, no SDPA) runs among the 64 tokens
only, and `einsum('bhgc,bhng->bhnc')` spreads them back to the points. Pre-LN blocks with a GELU MLP, a
preprocess MLP plus a learned placeholder vector, the last block's LayerNorm + Linear head.
Relative L2 loss per sample, AdamW (lr 1e-3, wd 1e-5), OneCycleLR, gradients clipped at 0.1, bf16 autocast.
Phase 1: 8 steps at 8 meshes x 16,384 points. Phase 2: no_grad evaluation of 4 meshes x 65,536 points (the
attention is linear in N). Phase 3: no_grad bf16 autocast inference on 2 meshes x 262,144 points.
3 phases."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2891)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


# --- synthetic meshes ------------------------------------------------------------------------------------
def make_batch(b, n, gen):
    # scattered points in the unit square, warped by a random smooth deformation per sample
    p = torch.rand(b, n, 2, device=dev, generator=gen)
    a = torch.rand(b, 1, 4, device=dev, generator=gen) * 0.15
    x = p[..., 0] + a[..., 0] * torch.sin(math.pi * p[..., 1]) + a[..., 1] * p[..., 0] * p[..., 1]
    y = p[..., 1] + a[..., 2] * torch.sin(2 * math.pi * p[..., 0]) - a[..., 3] * p[..., 0] ** 2
    pos = torch.stack([x, y], -1)
    bd = torch.minimum(p, 1 - p).amin(-1, keepdim=True)  # distance to the boundary
    k = 1 + 0.5 * torch.tanh(8 * (torch.sin(3 * x) * torch.cos(2 * y)))  # conductivity
    fx = torch.cat([bd, k.unsqueeze(-1)], -1)
    u = torch.sin(math.pi * p[..., 0]) * torch.sin(math.pi * p[..., 1]) / k + 0.1 * torch.cos(4 * x * y)
    return pos, fx, u.unsqueeze(-1)


# --- model -----------------------------------------------------------------------------------------------
class PhysicsAttention(nn.Module):
    def __init__(self, dim, heads=8, dim_head=32, dropout=0.0, slice_num=64):
        super().__init__()
        inner = dim_head * heads
        self.dim_head, self.heads = dim_head, heads
        self.scale = dim_head**-0.5
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(dropout)
        self.temperature = nn.Parameter(torch.ones([1, heads, 1, 1]) * 0.5)
        self.in_project_x = nn.Linear(dim, inner)
        self.in_project_fx = nn.Linear(dim, inner)
        self.in_project_slice = nn.Linear(dim_head, slice_num)
        torch.nn.init.orthogonal_(self.in_project_slice.weight)
        self.to_q = nn.Linear(dim_head, dim_head, bias=False)
        self.to_k = nn.Linear(dim_head, dim_head, bias=False)
        self.to_v = nn.Linear(dim_head, dim_head, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner, dim), nn.Dropout(dropout))

    def forward(self, x):
        B, N, _ = x.shape
        fx_mid = (
            self.in_project_fx(x).reshape(B, N, self.heads, self.dim_head).permute(0, 2, 1, 3).contiguous()
        )
        x_mid = self.in_project_x(x).reshape(B, N, self.heads, self.dim_head).permute(0, 2, 1, 3).contiguous()
        slice_weights = self.softmax(self.in_project_slice(x_mid) / self.temperature)  # B H N G
        slice_norm = slice_weights.sum(2)  # B H G
        slice_token = torch.einsum("bhnc,bhng->bhgc", fx_mid, slice_weights)
        slice_token = slice_token / ((slice_norm + 1e-5)[:, :, :, None].repeat(1, 1, 1, self.dim_head))
        q = self.to_q(slice_token)
        k = self.to_k(slice_token)
        v = self.to_v(slice_token)
        dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        attn = self.dropout(self.softmax(dots))
        out_slice_token = torch.matmul(attn, v)  # B H G D
        out_x = torch.einsum("bhgc,bhng->bhnc", out_slice_token, slice_weights)
        out_x = out_x.permute(0, 2, 1, 3).reshape(B, N, self.heads * self.dim_head)
        return self.to_out(out_x)


class MLP(nn.Module):
    def __init__(self, n_in, n_hidden, n_out, n_layers=0, res=True):
        super().__init__()
        self.linear_pre = nn.Sequential(nn.Linear(n_in, n_hidden), nn.GELU())
        self.linear_post = nn.Linear(n_hidden, n_out)
        self.linears = nn.ModuleList(
            nn.Sequential(nn.Linear(n_hidden, n_hidden), nn.GELU()) for _ in range(n_layers)
        )
        self.res = res

    def forward(self, x):
        x = self.linear_pre(x)
        for lin in self.linears:
            x = lin(x) + x if self.res else lin(x)
        return self.linear_post(x)


class TransolverBlock(nn.Module):
    def __init__(self, heads, hidden, mlp_ratio=1, slice_num=64, last_layer=False, out_dim=1):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = PhysicsAttention(hidden, heads=heads, dim_head=hidden // heads, slice_num=slice_num)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = MLP(hidden, hidden * mlp_ratio, hidden, n_layers=0, res=False)
        self.last_layer = last_layer
        if last_layer:
            self.ln_3 = nn.LayerNorm(hidden)
            self.mlp2 = nn.Linear(hidden, out_dim)

    def forward(self, fx):
        fx = self.attn(self.ln_1(fx)) + fx
        fx = self.mlp(self.ln_2(fx)) + fx
        if self.last_layer:
            return self.mlp2(self.ln_3(fx))
        return fx


class Transolver(nn.Module):
    def __init__(self, space_dim=2, fun_dim=2, n_layers=8, n_hidden=256, heads=8, mlp_ratio=2, slice_num=64):
        super().__init__()
        self.preprocess = MLP(fun_dim + space_dim, n_hidden * 2, n_hidden, n_layers=0, res=False)
        self.blocks = nn.ModuleList(
            TransolverBlock(heads, n_hidden, mlp_ratio, slice_num, last_layer=(i == n_layers - 1))
            for i in range(n_layers)
        )
        self.placeholder = nn.Parameter((1 / n_hidden) * torch.rand(n_hidden, dtype=torch.float))
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, (nn.LayerNorm, nn.BatchNorm1d)):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    def forward(self, pos, fx):
        fx = self.preprocess(torch.cat((pos, fx), -1))
        fx = fx + self.placeholder[None, None, :]
        for block in self.blocks:
            fx = block(fx)
        return fx


def rel_l2(pred, target):
    b = pred.shape[0]
    diff = torch.norm(pred.reshape(b, -1) - target.reshape(b, -1), 2, 1)
    norm = torch.norm(target.reshape(b, -1), 2, 1)
    return (diff / norm).mean()


model = Transolver().to(dev)
print("params", sum(p.numel() for p in model.parameters()))
STEPS = 8
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-5)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, epochs=1, steps_per_epoch=STEPS)
gen = torch.Generator(device=dev)
gen.manual_seed(7)

# --- phase 1: training on 8 meshes of 16,384 points --------------------------------------------------------
model.train()
for step in range(STEPS):
    pos, fx, u = make_batch(8, 16384, gen)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(pos, fx)
    loss = rel_l2(out.float(), u)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    sched.step()
    print(f"step {step} rel_l2 {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e}")
report("phase1 train 8x16384")

# --- phase 2: fp32 evaluation on finer meshes ---------------------------------------------------------------
model.eval()
with torch.no_grad():
    errs = []
    for _ in range(2):
        pos, fx, u = make_batch(4, 65536, gen)
        out = model(pos, fx)
        errs.append(rel_l2(out, u))
    print("eval 65,536 rel_l2", torch.stack(errs).mean().item())
report("phase2 eval fp32 4x65536")

# --- phase 3: bf16 inference on very fine meshes ------------------------------------------------------------
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    pos, fx, u = make_batch(2, 262144, gen)
    out = model(pos, fx)
    err = rel_l2(out.float(), u)
    field_max = F.relu(out.float()).amax(dim=1).squeeze(-1)
print("fine mesh rel_l2", err.item(), "max", field_max.tolist())
del out, pos, fx, u
report("phase3 bf16 inference 2x262144")
