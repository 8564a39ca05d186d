"""Soft Rasterizer (Liu et al., ICCV 2019) written densely in plain PyTorch the way ShichenLiu/SoftRas's
soft_rasterize CUDA kernel computes it, in the setting of its examples/demo_deform.py (deform a sphere
into a target shape from multi-view images): a UV sphere template (1,106 vertices, 2,208 faces) with
SoftRas's parameterisation (sigmoid(base + displace) * sign(template), a tanh'd centroid), projected
by a look_at camera (distance 2.732, elevation 30, 8 azimuths a step out of 48) with a 30-degree
perspective. For every (view, pixel, face) of a 64 x 64 image the kernel's quantities are dense
(B, P, F) tensors: the squared distance from the pixel to each edge (the projection parameter clamped to
the segment), the minimum over the three edges, the inside test from the three edge functions' signs,
the soft coverage D = sigmoid(sign * d^2 / sigma) (sigma 1e-4), the silhouette as 1 - exp(sum log(1 - D))
over faces, barycentric weights from the edge functions and the perspective-correct depth
1 / sum(w_i / z_i), and the colour as SoftRas's softmax aggregation over faces of D * exp((z_far - z) /
(z_far - z_near) / gamma) with a background term (gamma 1e-4; taken in log space, logsigmoid plus the
depth term, the background's logit concatenated, one softmax over F + 1), per-vertex learned colours
interpolated barycentrically. Losses as the demo: negative IoU of the silhouettes, an L2 colour term,
SoftRas's LaplacianLoss (a dense (V, V) uniform Laplacian matmul) and FlattenLoss (dihedral cosines of
every edge's two faces, gathered through precomputed vertex indices). Targets rendered under no_grad
from a bumpy star-shaped mesh with sigma 1e-5. Adam (lr 0.01, betas (0.5, 0.99)), 6 steps. Then a
no_grad render of 24 views at 128 x 128, one view at a time. Seeded, fixed sizes. 3 phases + end."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2845)
dev = "cuda"
NLAT, NLON = 24, 48
IMG, VIEWS, BATCH = 64, 48, 8
DIST, ELEV, ANGLE = 2.732, 30.0, 30.0
NEAR, FAR, EPS = 1.0, 100.0, 1e-10


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def uv_sphere(nlat, nlon):
    verts = [(0.0, 0.0, 1.0)]
    for i in range(1, nlat):
        th = math.pi * i / nlat
        for j in range(nlon):
            ph = 2 * math.pi * j / nlon
            verts.append((math.sin(th) * math.cos(ph), math.sin(th) * math.sin(ph), math.cos(th)))
    verts.append((0.0, 0.0, -1.0))
    faces = []
    ring = lambda i, j: 1 + (i - 1) * nlon + (j % nlon)  # noqa: E731
    for j in range(nlon):
        faces.append((0, ring(1, j), ring(1, j + 1)))
    for i in range(1, nlat - 1):
        for j in range(nlon):
            a, b, c, d = ring(i, j), ring(i, j + 1), ring(i + 1, j), ring(i + 1, j + 1)
            faces.append((a, c, b))
            faces.append((b, c, d))
    last = len(verts) - 1
    for j in range(nlon):
        faces.append((last, ring(nlat - 1, j + 1), ring(nlat - 1, j)))
    return torch.tensor(verts), torch.tensor(faces, dtype=torch.long)


def laplacian_matrix(nv, faces):
    lap = torch.zeros(nv, nv)
    for a, b in ((0, 1), (1, 2), (2, 0)):
        lap[faces[:, a], faces[:, b]] = -1
        lap[faces[:, b], faces[:, a]] = -1
    lap.fill_diagonal_(0)
    deg = -lap.sum(1)
    lap = lap / deg[:, None]
    lap.fill_diagonal_(1)
    return lap


def flatten_indices(faces):
    edges = {}
    for f in faces.tolist():
        for i in range(3):
            a, b, o = f[i], f[(i + 1) % 3], f[(i + 2) % 3]
            edges.setdefault((min(a, b), max(a, b)), []).append(o)
    v0s, v1s, v2s, v3s = [], [], [], []
    for (a, b), opp in edges.items():
        if len(opp) == 2:
            v0s.append(a), v1s.append(b), v2s.append(opp[0]), v3s.append(opp[1])
    return [torch.tensor(x, dtype=torch.long) for x in (v0s, v1s, v2s, v3s)]


template, faces = uv_sphere(NLAT, NLON)
NV, NF = template.shape[0], faces.shape[0]
lap = laplacian_matrix(NV, faces).to(dev)
fl_idx = [t.to(dev) for t in flatten_indices(faces)]
template, faces = template.to(dev) * 0.5, faces.to(dev)


def look_at(vertices, azimuth_deg):
    az, el = math.radians(azimuth_deg), math.radians(ELEV)
    eye = torch.tensor(
        [DIST * math.cos(el) * math.sin(az), DIST * math.sin(el), -DIST * math.cos(el) * math.cos(az)],
        device=dev,
    )
    z_axis = F.normalize(-eye, dim=0)
    up = torch.tensor([0.0, 1.0, 0.0], device=dev)
    x_axis = F.normalize(torch.linalg.cross(up, z_axis), dim=0)
    y_axis = F.normalize(torch.linalg.cross(z_axis, x_axis), dim=0)
    r = torch.stack([x_axis, y_axis, z_axis])
    return (vertices - eye) @ r.t()


def project(vertices_cam):
    width = math.tan(math.radians(ANGLE))
    z = vertices_cam[..., 2]
    x = vertices_cam[..., 0] / (z * width)
    y = vertices_cam[..., 1] / (z * width)
    return torch.stack([x, y, z], dim=-1)


def pixel_grid(img):
    p = (torch.arange(img, device=dev, dtype=torch.float32) + 0.5) / img * 2 - 1
    yy, xx = torch.meshgrid(-p, p, indexing="ij")
    return xx.reshape(1, -1, 1), yy.reshape(1, -1, 1)  # (1, P, 1)


def soft_rasterize(face_verts, face_colors, img, sigma, gamma=1e-4):
    """face_verts (B, F, 3, 3) in NDC x, y and camera z; face_colors (B, F, 3, 3) per corner.
    Returns (B, 4, img, img): RGB by softmax aggregation, alpha by the silhouette product."""
    b = face_verts.shape[0]
    px, py = pixel_grid(img)
    fx, fy, fz = (face_verts[..., k].unsqueeze(1) for k in range(3))  # (B, 1, F, 3)
    d2s, crosses = [], []
    for i in range(3):
        ax, ay = fx[..., i], fy[..., i]
        abx, aby = fx[..., (i + 1) % 3] - ax, fy[..., (i + 1) % 3] - ay
        apx, apy = px - ax, py - ay  # (B, P, F)
        t = ((apx * abx + apy * aby) / (abx * abx + aby * aby + EPS)).clamp(0.0, 1.0)
        cx, cy = apx - t * abx, apy - t * aby
        d2s.append(cx * cx + cy * cy)
        crosses.append(abx * apy - aby * apx)
    d2 = torch.minimum(torch.minimum(d2s[0], d2s[1]), d2s[2])
    inside = ((crosses[0] > 0) & (crosses[1] > 0) & (crosses[2] > 0)) | (
        (crosses[0] < 0) & (crosses[1] < 0) & (crosses[2] < 0)
    )
    sign = torch.where(inside, 1.0, -1.0)
    logit = sign * d2 / sigma
    D = torch.sigmoid(logit)
    alpha = 1.0 - torch.exp(torch.log(torch.clamp(1.0 - D, min=1e-10)).sum(-1))  # (B, P)
    # barycentric weights from the edge functions (the sub-triangle opposite each corner), clipped
    area = crosses[0] + crosses[1] + crosses[2]
    area = torch.where(area.abs() < EPS, torch.full_like(area, EPS), area)
    w = torch.stack([crosses[1], crosses[2], crosses[0]], dim=-1) / area.unsqueeze(-1)  # (B, P, F, 3)
    w = w.clamp(0.0, 1.0)
    w = w / w.sum(-1, keepdim=True).clamp_min(EPS)
    zp = 1.0 / (w / fz).sum(-1).clamp_min(1.0 / FAR)  # perspective-correct depth (B, P, F)
    zn = ((FAR - zp) / (FAR - NEAR)).clamp(0.0, 1.0)
    # softmax aggregation over the faces and the background, D * exp(zn / gamma) in log space
    agg = torch.cat([F.logsigmoid(logit) + zn / gamma, torch.full_like(zn[..., :1], EPS / gamma)], dim=-1)
    weight = torch.softmax(agg, dim=-1)  # (B, P, F + 1)
    color = torch.einsum("bpfk,bfkc->bpfc", w, face_colors)
    rgb = (weight[..., :-1].unsqueeze(-1) * color).sum(2) + weight[..., -1:] * 1.0  # white background
    out = torch.cat([rgb, alpha.unsqueeze(-1)], dim=-1)
    return out.permute(0, 2, 1).reshape(b, 4, img, img)


def render(vertices, vert_colors, azimuths, img, sigma):
    fvs, fcs = [], []
    for az in azimuths:
        v = project(look_at(vertices, az))
        fvs.append(v[faces])
        fcs.append(vert_colors[faces])
    return soft_rasterize(torch.stack(fvs), torch.stack(fcs), img, sigma)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("vertices", template.clone())
        self.displace = nn.Parameter(torch.zeros_like(template))
        self.center = nn.Parameter(torch.zeros(1, 3, device=dev))
        self.colors = nn.Parameter(torch.full((NV, 3), 0.5, device=dev))

    def forward(self):
        base = torch.log(self.vertices.abs() / (1 - self.vertices.abs()))
        centroid = torch.tanh(self.center)
        vertices = torch.sigmoid(base + self.displace) * torch.sign(self.vertices)
        vertices = F.relu(vertices) * (1 - centroid) - F.relu(-vertices) * (centroid + 1)
        vertices = vertices + centroid
        lap_loss = (lap @ vertices).pow(2).sum(-1).mean()
        v0, v1, v2, v3 = (vertices[i] for i in fl_idx)
        a1, b1 = v1 - v0, v2 - v0
        a1l2, b1l2 = a1.pow(2).sum(-1), b1.pow(2).sum(-1)
        a1l1, b1l1 = (a1l2 + 1e-6).sqrt(), (b1l2 + 1e-6).sqrt()
        ab1 = (a1 * b1).sum(-1)
        cos1 = ab1 / (a1l1 * b1l1 + 1e-6)
        sin1 = (1 - cos1.pow(2) + 1e-6).sqrt()
        c1 = a1 * (ab1 / (a1l2 + 1e-6))[:, None]
        cb1, cb1l1 = b1 - c1, b1l1 * sin1
        a2, b2 = v1 - v0, v3 - v0
        a2l2, b2l2 = a2.pow(2).sum(-1), b2.pow(2).sum(-1)
        a2l1, b2l1 = (a2l2 + 1e-6).sqrt(), (b2l2 + 1e-6).sqrt()
        ab2 = (a2 * b2).sum(-1)
        cos2 = ab2 / (a2l1 * b2l1 + 1e-6)
        sin2 = (1 - cos2.pow(2) + 1e-6).sqrt()
        c2 = a2 * (ab2 / (a2l2 + 1e-6))[:, None]
        cb2, cb2l1 = b2 - c2, b2l1 * sin2
        cos = (cb1 * cb2).sum(-1) / (cb1l1 * cb2l1 + 1e-6)
        flat_loss = (cos + 1).pow(2).sum()
        return vertices, torch.sigmoid(self.colors), lap_loss, flat_loss


def neg_iou_loss(predict, target):
    dims = tuple(range(predict.ndimension())[1:])
    intersect = (predict * target).sum(dims)
    union = (predict + target - predict * target).sum(dims) + 1e-6
    return 1.0 - (intersect / union).sum() / intersect.nelement()


# targets: a bumpy star-shaped mesh with fixed colours, rendered sharply
with torch.no_grad():
    th = torch.acos(template[:, 2] / 0.5)
    ph = torch.atan2(template[:, 1], template[:, 0])
    radius = 1.0 + 0.25 * torch.sin(3 * th) * torch.cos(2 * ph)
    target_v = template * radius[:, None]
    target_c = torch.stack(
        [0.5 + 0.5 * torch.cos(ph), 0.5 + 0.5 * torch.sin(th), 0.5 - 0.3 * torch.cos(th)], -1
    )
    azimuths = [360.0 * k / VIEWS for k in range(VIEWS)]
    targets = torch.cat(
        [render(target_v, target_c, azimuths[k : k + 8], IMG, 1e-5) for k in range(0, VIEWS, 8)]
    )
print("mesh", NV, NF, "targets", tuple(targets.shape))

model = Model().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.5, 0.99))
report("setup")

gen = torch.Generator()
gen.manual_seed(2845)
for step in range(6):
    views = torch.randperm(VIEWS, generator=gen)[:BATCH].tolist()
    vertices, colors, lap_loss, flat_loss = model()
    images = render(vertices, colors, [azimuths[v] for v in views], IMG, 1e-4)
    gt = targets[views]
    iou = neg_iou_loss(images[:, 3], gt[:, 3])
    rgb = F.mse_loss(images[:, :3] * gt[:, 3:], gt[:, :3] * gt[:, 3:])
    loss = iou + rgb + 0.03 * lap_loss + 0.0003 * flat_loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f} iou {iou.item():.4f}")
    del vertices, colors, images, loss, iou, rgb
report("train")

with torch.no_grad():
    vertices, colors, _, _ = model()
    frames = torch.cat([render(vertices, colors, [360.0 * k / 24], 128, 1e-5) for k in range(24)])
    print("render", tuple(frames.shape), f"{frames[:, 3].mean().item():.4f}")
report("eval")
print("done")
