"""Neural signed distance functions with the eikonal loss (IGR / NeuS-style geometry, Gropp et al. 2020),
then an Instant-NGP-style multiresolution hash-grid encoding by hand, and dense-grid extraction.

Part 1: an 8-layer 512-wide MLP with geometric initialisation (the last layer initialised so the network
starts as the SDF of a sphere), Softplus(beta=100) activations and a skip connection concatenating the
input at layer 4 (divided by sqrt 2), fitted to a random surface point cloud with normals: |f(x)| and
1 - cos(grad f, n) on surface points, the eikonal term (|grad f| - 1)^2 on surface and uniform points,
the gradients by torch.autograd.grad(create_graph=True) so that the loss's backward is a double backward
through every Linear and Softplus. Adam lr 1e-4, 16,384 surface + 16,384 uniform points a step.

Part 2: evaluation of the SDF on a dense 256^3 grid under no_grad in chunks of 262,144 points (the grid of
values kept on the device), and the zero crossings counted along the three axes by sign comparisons of
neighbouring slices (fixed-size tensors, a sum per axis).

Part 3: a hash-grid SDF: 16 levels (resolutions 16 to 2,048), 2^19 entries of 2 features a level (an
nn.Parameter table of (16, 2^19, 2)), the 8 corner indices of each point hashed with the Instant-NGP primes
(int64 arithmetic, xor, modulo table size; dense indexing on the coarse levels), the table read by
indexing and trilinearly interpolated, then a 64-wide 2-layer MLP; the same loss (eikonal gradients by
autograd.grad create_graph through the interpolation weights) under bf16 autocast, Adam with eps 1e-15,
65,536 + 65,536 points a step.

Phases: 3 steps of the MLP SDF; the 256^3 grid extraction under no_grad; 3 steps of the hash-grid SDF;
then the hash-grid SDF on a 384^3 grid under inference_mode and bf16 autocast in chunks of 1,048,576
points. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2126)
if SMALL:
    PTS, WIDTH, GRID, CHUNK, HASH_PTS, LOG2_T, BIG_GRID, BIG_CHUNK = 512, 64, 32, 8192, 1024, 12, 48, 16384
else:
    PTS, WIDTH, GRID, CHUNK, HASH_PTS, LOG2_T, BIG_GRID, BIG_CHUNK = 16384, 512, 256, 262144, 65536, 19, 384, 1048576
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class ImplicitNet(nn.Module):
    def __init__(self, width=512, layers=8, skip=4, radius=0.6):
        super().__init__()
        dims = [3] + [width] * layers + [1]
        self.skip = skip
        self.lins = nn.ModuleList()
        for i in range(len(dims) - 1):
            dout = dims[i + 1] - 3 if i + 1 == skip else dims[i + 1]
            lin = nn.Linear(dims[i], dout)
            if i == len(dims) - 2:
                nn.init.normal_(lin.weight, mean=math.sqrt(math.pi) / math.sqrt(dims[i]), std=1e-4)
                nn.init.constant_(lin.bias, -radius)
            else:
                nn.init.normal_(lin.weight, 0.0, math.sqrt(2) / math.sqrt(dout))
                nn.init.constant_(lin.bias, 0.0)
            self.lins.append(lin)
        self.act = nn.Softplus(beta=100)

    def forward(self, x):
        h = x
        for i, lin in enumerate(self.lins):
            if i == self.skip:
                h = torch.cat([h, x], dim=-1) / math.sqrt(2)
            h = lin(h)
            if i < len(self.lins) - 1:
                h = self.act(h)
        return h


PRIMES = (1, 2654435761, 805459861)


class HashGrid(nn.Module):
    def __init__(self, levels=16, log2_t=19, feats=2, base=16, finest=2048):
        super().__init__()
        self.size = 2**log2_t
        growth = math.exp((math.log(finest) - math.log(base)) / (levels - 1))
        self.res = [int(math.floor(base * growth**i)) for i in range(levels)]
        self.table = nn.Parameter(torch.empty(levels, self.size, feats).uniform_(-1e-4, 1e-4))
        corners = torch.tensor([[(c >> k) & 1 for k in range(3)] for c in range(8)])
        self.register_buffer("corners", corners)

    def forward(self, x):
        x = (x + 1) / 2
        outs = []
        for lvl, res in enumerate(self.res):
            pos = x * res
            cell = torch.floor(pos).long()
            frac = pos - cell
            idx = cell[:, None, :] + self.corners[None]
            if (res + 1) ** 3 <= self.size:
                h = idx[..., 0] + (res + 1) * (idx[..., 1] + (res + 1) * idx[..., 2])
            else:
                h = (idx[..., 0] * PRIMES[0]) ^ (idx[..., 1] * PRIMES[1]) ^ (idx[..., 2] * PRIMES[2])
            h = h % self.size
            w = torch.where(self.corners[None].bool(), frac[:, None, :], 1 - frac[:, None, :]).prod(-1)
            feat = self.table[lvl][h]
            outs.append((feat * w[..., None]).sum(1))
        return torch.cat(outs, dim=-1)


class HashSDF(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = HashGrid(log2_t=LOG2_T)
        self.mlp = nn.Sequential(nn.Linear(32 + 3, 64), nn.Softplus(beta=100), nn.Linear(64, 64), nn.Softplus(beta=100), nn.Linear(64, 1))

    def forward(self, x):
        return self.mlp(torch.cat([x, self.enc(x)], dim=-1)) + x.norm(dim=-1, keepdim=True) - 0.6


def surface(n):
    d = F.normalize(torch.randn(n, 3, device=device), dim=1)
    r = 0.5 + 0.1 * torch.sin(5 * d[:, :1]) * torch.sin(4 * d[:, 1:2])
    return d * r, d


def sdf_loss(net, n, autocast=False):
    pts, normals = surface(n)
    free = torch.rand(n, 3, device=device) * 2 - 1
    x = torch.cat([pts, free]).requires_grad_(True)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=autocast and device == "cuda"):
        y = net(x).float()
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y), create_graph=True)
    on = y[:n].abs().mean()
    normal = (1 - F.cosine_similarity(g[:n], normals, dim=-1)).mean()
    eik = ((g.norm(dim=-1) - 1) ** 2).mean()
    return on + normal + 0.1 * eik


def grid_points(res, start, count):
    i = torch.arange(start, start + count, device=device)
    z, y, x = i // (res * res), (i // res) % res, i % res
    return torch.stack([x, y, z], -1).float() * (2.0 / (res - 1)) - 1


def crossings(vol):
    s = vol > 0
    return sum(int((s.narrow(d, 1, s.shape[d] - 1) != s.narrow(d, 0, s.shape[d] - 1)).sum()) for d in range(3))


net = ImplicitNet(WIDTH).to(device)
opt = torch.optim.Adam(net.parameters(), lr=1e-4)
for step in range(3):
    loss = sdf_loss(net, PTS)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"mlp sdf loss {loss.item():.4f}")
report("mlp sdf")

with torch.no_grad():
    total = GRID**3
    vol = torch.empty(total, device=device)
    for s in range(0, total, CHUNK):
        vol[s : s + CHUNK] = net(grid_points(GRID, s, min(CHUNK, total - s))).squeeze(-1)
    vol = vol.view(GRID, GRID, GRID)
    print(f"grid {GRID}^3 crossings {crossings(vol)}")
    del vol
report("extract")

hnet = HashSDF().to(device)
hopt = torch.optim.Adam(hnet.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-15)
for step in range(3):
    loss = sdf_loss(hnet, HASH_PTS, autocast=True)
    hopt.zero_grad(set_to_none=True)
    loss.backward()
    hopt.step()
print(f"hash sdf loss {loss.item():.4f}")
report("hash sdf")

with torch.inference_mode(), torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    total = BIG_GRID**3
    vol = torch.empty(total, device=device, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    for s in range(0, total, BIG_CHUNK):
        vol[s : s + BIG_CHUNK] = hnet(grid_points(BIG_GRID, s, min(BIG_CHUNK, total - s))).squeeze(-1)
    print(f"grid {BIG_GRID}^3 crossings {crossings(vol.view(BIG_GRID, BIG_GRID, BIG_GRID))}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
