"""Template mesh deformation to a point cloud (Pixel2Mesh / pytorch3d's deform-a-sphere tutorial style) by
hand: a torus grid mesh deformed by a coordinate MLP plus free per-vertex offsets, fitted to a random target
point cloud with chamfer distance and the usual mesh regularisers.

The mesh is a regular (H x W) torus grid (two triangles a quad, 3 undirected edges a vertex, every vertex of
degree 6), built on the GPU from index arithmetic. The uniform Laplacian L = I - D^-1 A is a sparse COO
matrix (torch.sparse_coo_tensor over the diagonal and both directions of every edge, coalesced once; the
degrees by index_add_), applied with torch.sparse.mm (its backward L^T @ grad). Vertices = template +
MLP(positional encoding of the template, 6 frequencies; 3 x 256 SiLU) * 0.1 + offsets. Surface samples: a
fixed set of random faces with fixed barycentric coordinates. Loss: chamfer distance both ways by
torch.cdist over chunks of the samples (each chunk's distance matrix used for both directions, the
reverse direction by a running torch.minimum), + 0.1 Laplacian smoothing (||L v|| mean) + edge-length
variance + normal consistency between the two triangles of each quad.

Phases: 3 steps of Adam (lr 1e-3) on a 256 x 512 torus (131,072 vertices) against 32,768 target points
with 32,768 surface samples in chunks of 8,192; evaluation under no_grad (chamfer with 65,536 samples in
chunks of 16,384, vertex normals accumulated by index_add_); then the subdivided 512 x 1,024 torus
(524,288 vertices, a new template, new Laplacian) with the MLP under bf16 autocast and SGD momentum 0.9,
65,536 samples against 65,536 targets in chunks of 8,192. 3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2125)
(H, W), (H2, W2), SAMPLES, TARGETS, CHUNK, BIG_SAMPLES, BIG_CHUNK = (
    ((16, 32), (32, 64), 1024, 1024, 256, 2048, 512) if SMALL else ((256, 512), (512, 1024), 32768, 32768, 8192, 65536, 8192)
)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def torus(h, w, major=1.0, minor=0.4):
    u = torch.arange(h, device=device) * (2 * math.pi / h)
    v = torch.arange(w, device=device) * (2 * math.pi / w)
    uu, vv = torch.meshgrid(u, v, indexing="ij")
    verts = torch.stack(
        [(major + minor * torch.cos(uu)) * torch.cos(vv), (major + minor * torch.cos(uu)) * torch.sin(vv), minor * torch.sin(uu)], -1
    ).reshape(-1, 3)
    i, j = torch.meshgrid(torch.arange(h, device=device), torch.arange(w, device=device), indexing="ij")
    a = i * w + j
    b = i * w + (j + 1) % w
    c = ((i + 1) % h) * w + j
    d = ((i + 1) % h) * w + (j + 1) % w
    faces = torch.cat([torch.stack([a, b, d], -1).reshape(-1, 3), torch.stack([a, d, c], -1).reshape(-1, 3)])
    edges = torch.cat([torch.stack([a, b], -1), torch.stack([a, c], -1), torch.stack([a, d], -1)]).reshape(-1, 2)
    return verts, faces, edges


def laplacian(n, edges):
    row = torch.cat([edges[:, 0], edges[:, 1]])
    col = torch.cat([edges[:, 1], edges[:, 0]])
    deg = torch.zeros(n, device=device).index_add_(0, row, torch.ones_like(row, dtype=torch.float32))
    diag = torch.arange(n, device=device)
    idx = torch.stack([torch.cat([diag, row]), torch.cat([diag, col])])
    val = torch.cat([torch.ones(n, device=device), -1.0 / deg[row]])
    return torch.sparse_coo_tensor(idx, val, (n, n)).coalesce()


class OffsetMLP(nn.Module):
    def __init__(self, freqs=6, hidden=256):
        super().__init__()
        self.freqs = freqs
        self.net = nn.Sequential(
            nn.Linear(3 + 6 * freqs, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 3),
        )

    def forward(self, x):
        f = 2.0 ** torch.arange(self.freqs, device=x.device)
        xf = (x[..., None] * f).flatten(-2)
        return self.net(torch.cat([x, torch.sin(xf), torch.cos(xf)], -1))


def face_normals(verts, faces):
    v0, v1, v2 = verts[faces[:, 0]], verts[faces[:, 1]], verts[faces[:, 2]]
    return torch.linalg.cross(v1 - v0, v2 - v0)


def sample_surface(verts, faces, face_idx, bary):
    tri = verts[faces[face_idx]]
    return (tri * bary[..., None]).sum(1)


def chamfer(x, y, chunk):
    fwd = []
    back = torch.full((y.shape[0],), float("inf"), device=device)
    for i in range(0, x.shape[0], chunk):
        d = torch.cdist(x[i : i + chunk], y)
        fwd.append(d.min(dim=1).values)
        back = torch.minimum(back, d.min(dim=0).values)
    return torch.cat(fwd).square().mean() + back.square().mean()


def losses(template, offsets, mlp, faces, edges, lap, face_idx, bary, target, chunk, autocast=False):
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=autocast and device == "cuda"):
        delta = mlp(template).float()
    verts = template + 0.1 * delta + offsets
    pts = sample_surface(verts, faces, face_idx, bary)
    loss_chamfer = chamfer(pts, target, chunk)
    loss_lap = torch.sparse.mm(lap, verts).norm(dim=1).mean()
    e = verts[edges[:, 0]] - verts[edges[:, 1]]
    length = e.norm(dim=1)
    loss_edge = ((length - length.mean()) ** 2).mean()
    n = F.normalize(face_normals(verts, faces), dim=1)
    half = faces.shape[0] // 2
    loss_normal = (1 - (n[:half] * n[half:]).sum(1)).mean()
    return loss_chamfer + 0.1 * loss_lap + loss_edge + 0.01 * loss_normal, verts


def surface_samples(n_faces, n):
    face_idx = torch.randint(0, n_faces, (n,), device=device)
    bary = torch.rand(n, 3, device=device)
    return face_idx, bary / bary.sum(1, keepdim=True)


def target_cloud(n):
    p = F.normalize(torch.randn(n, 3, device=device), dim=1)
    return p * (0.8 + 0.2 * torch.sin(4 * p[:, :1]) * torch.cos(3 * p[:, 1:2]))


template, faces, edges = torus(H, W)
lap = laplacian(template.shape[0], edges)
mlp = OffsetMLP().to(device)
offsets = torch.zeros_like(template, requires_grad=True)
opt = torch.optim.Adam(list(mlp.parameters()) + [offsets], lr=1e-3)
target = target_cloud(TARGETS)
face_idx, bary = surface_samples(faces.shape[0], SAMPLES)
for step in range(3):
    loss, _ = losses(template, offsets, mlp, faces, edges, lap, face_idx, bary, target, CHUNK)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"deform loss {loss.item():.5f} vertices {template.shape[0]}")
report("deform")

with torch.no_grad():
    verts = template + 0.1 * mlp(template) + offsets
    fi, ba = surface_samples(faces.shape[0], 2 * SAMPLES)
    cd = chamfer(sample_surface(verts, faces, fi, ba), target_cloud(2 * SAMPLES), 2 * CHUNK)
    vn = torch.zeros_like(verts)
    fn = face_normals(verts, faces)
    for k in range(3):
        vn.index_add_(0, faces[:, k], fn)
    vn = F.normalize(vn, dim=1)
    print(f"eval chamfer {cd.item():.5f} normal z mean {vn[:, 2].mean().item():.4f}")
    del verts, vn, fn, fi, ba
report("eval")

del opt, offsets, lap, faces, edges, face_idx, bary, target
template, faces, edges = torus(H2, W2)
lap = laplacian(template.shape[0], edges)
offsets = torch.zeros_like(template, requires_grad=True)
opt = torch.optim.SGD(list(mlp.parameters()) + [offsets], lr=1e-2, momentum=0.9)
target = target_cloud(BIG_SAMPLES)
face_idx, bary = surface_samples(faces.shape[0], BIG_SAMPLES)
for step in range(3):
    loss, _ = losses(template, offsets, mlp, faces, edges, lap, face_idx, bary, target, BIG_CHUNK, autocast=True)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"subdivided loss {loss.item():.5f} vertices {template.shape[0]}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
