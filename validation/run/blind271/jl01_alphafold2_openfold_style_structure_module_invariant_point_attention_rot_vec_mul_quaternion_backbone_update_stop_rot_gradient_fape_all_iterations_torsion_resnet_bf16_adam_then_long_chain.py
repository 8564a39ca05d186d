"""AlphaFold 2's structure module trained on frozen trunk outputs, written the way OpenFold writes it
(aqlaboratory/openfold: structure_module.py, utils/rigid_utils.py, loss.py): Invariant Point Attention
with 12 heads of 16 scalar channels, 4 query/key points and 8 value points per head, the points made by
linear layers, split in three and stacked into (..., 3) vectors and put into the global frame of each
residue by `rot_vec_mul` (the rotation applied element by element, as rigid_utils does, not by matmul),
the logits from scalar q.k, the pair bias `linear_b(z)` and the squared point distances
(`q_pts[..., None, :, :] - k_pts[..., None, :, :, :]`, a (B, N, N, H, Pq, 3) tensor) weighted by
`softplus(head_weights)`, the value points gathered as OpenFold does (`a[..., None, :, :, None] *
v_pts[..., None, :, :]` summed: a (B, H, 3, N, N, Pv) product), put back into the local frames by the
inverse rotation, their norms, and the pair output `a @ z`; then transition, the backbone update (6
numbers: a quaternion (1, b, c, d) normalised to a rotation, composed with the frames, and a translation),
the torsion-angle ResNet (7 angles as (sin, cos), angle-norm loss), 8 iterations with shared weights and
`stop_rot_gradient` (the rotations detached between iterations). c_s 384, c_z 128. The loss is FAPE over
all 8 iterations' backbone frames (every frame's inverse applied to every C-alpha position: (8, B, N, N, 3),
clamped at 10 A, scale 10) plus the torsion loss; targets are a synthetic chain (a 3.8 A random walk with
random frames from a seeded CPU generator). bf16 autocast (the rigid algebra stays fp32), Adam (1e-3,
eps 1e-6), gradient clipping at 0.1, 4 steps at batch 2 x 384 residues with random single and pair
representations. Then a no_grad prediction of one 768-residue chain. Fixed sizes. 3 phases and the end."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2711)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


C_S, C_Z, C_IPA, H, PQ, PV, BLOCKS, ANGLES, C_RES, TRANS_SCALE = 384, 128, 16, 12, 4, 8, 8, 7, 128, 10.0


# ---- rigid_utils, as OpenFold writes it: rotations as (..., 3, 3) fp32 matrices, vectors (..., 3)
def rot_vec_mul(r, t):
    x, y, z = torch.unbind(t, dim=-1)
    return torch.stack(
        [
            r[..., 0, 0] * x + r[..., 0, 1] * y + r[..., 0, 2] * z,
            r[..., 1, 0] * x + r[..., 1, 1] * y + r[..., 1, 2] * z,
            r[..., 2, 0] * x + r[..., 2, 1] * y + r[..., 2, 2] * z,
        ],
        dim=-1,
    )


def rot_matmul(a, b):
    def row_mul(i):
        return torch.stack(
            [
                a[..., i, 0] * b[..., 0, 0] + a[..., i, 1] * b[..., 1, 0] + a[..., i, 2] * b[..., 2, 0],
                a[..., i, 0] * b[..., 0, 1] + a[..., i, 1] * b[..., 1, 1] + a[..., i, 2] * b[..., 2, 1],
                a[..., i, 0] * b[..., 0, 2] + a[..., i, 1] * b[..., 1, 2] + a[..., i, 2] * b[..., 2, 2],
            ],
            dim=-1,
        )

    return torch.stack([row_mul(0), row_mul(1), row_mul(2)], dim=-2)


def quat_to_rot(q):
    q = q / q.norm(dim=-1, keepdim=True)
    a, b, c, d = torch.unbind(q, dim=-1)
    return torch.stack(
        [
            torch.stack([a * a + b * b - c * c - d * d, 2 * (b * c - a * d), 2 * (b * d + a * c)], -1),
            torch.stack([2 * (b * c + a * d), a * a - b * b + c * c - d * d, 2 * (c * d - a * b)], -1),
            torch.stack([2 * (b * d - a * c), 2 * (c * d + a * b), a * a - b * b - c * c + d * d], -1),
        ],
        dim=-2,
    )


def apply(rot, trans, pts):
    return rot_vec_mul(rot, pts) + trans


def invert_apply(rot, trans, pts):
    return rot_vec_mul(rot.transpose(-1, -2), pts - trans)


class IPA(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear_q = nn.Linear(C_S, H * C_IPA)
        self.linear_kv = nn.Linear(C_S, 2 * H * C_IPA)
        self.linear_q_points = nn.Linear(C_S, H * PQ * 3)
        self.linear_kv_points = nn.Linear(C_S, H * (PQ + PV) * 3)
        self.linear_b = nn.Linear(C_Z, H)
        self.head_weights = nn.Parameter(torch.zeros(H))
        self.linear_out = nn.Linear(H * (C_Z + C_IPA + PV * 4), C_S)
        nn.init.zeros_(self.linear_out.weight)

    def forward(self, s, z, rot, trans, mask):
        q = self.linear_q(s).view(*s.shape[:-1], H, C_IPA)
        k, v = self.linear_kv(s).view(*s.shape[:-1], H, 2 * C_IPA).split(C_IPA, dim=-1)
        q_pts = torch.stack(torch.split(self.linear_q_points(s), H * PQ, dim=-1), dim=-1)
        q_pts = apply(rot[..., None, :, :], trans[..., None, :], q_pts).view(*s.shape[:-1], H, PQ, 3)
        kv_pts = torch.stack(torch.split(self.linear_kv_points(s), H * (PQ + PV), dim=-1), dim=-1)
        kv_pts = apply(rot[..., None, :, :], trans[..., None, :], kv_pts).view(*s.shape[:-1], H, PQ + PV, 3)
        k_pts, v_pts = torch.split(kv_pts, [PQ, PV], dim=-2)
        b = self.linear_b(z)  # (B, N, N, H)

        a = torch.matmul(q.permute(0, 2, 1, 3), k.permute(0, 2, 3, 1))  # (B, H, N, N)
        a = a * math.sqrt(1.0 / (3 * C_IPA))
        a = a + math.sqrt(1.0 / 3) * b.permute(0, 3, 1, 2)
        pt_att = q_pts.unsqueeze(-4) - k_pts.unsqueeze(-5)  # (B, N, N, H, PQ, 3)
        pt_att = pt_att**2
        pt_att = sum(torch.unbind(pt_att, dim=-1))
        head_weights = F.softplus(self.head_weights).view(1, 1, 1, H, 1)
        head_weights = head_weights * math.sqrt(1.0 / (3 * (PQ * 9.0 / 2)))
        pt_att = torch.sum(pt_att * head_weights, dim=-1) * (-0.5)  # (B, N, N, H)
        square_mask = mask.unsqueeze(-1) * mask.unsqueeze(-2)
        square_mask = 1e5 * (square_mask - 1)
        a = a + pt_att.permute(0, 3, 1, 2) + square_mask.unsqueeze(-3)
        a = torch.softmax(a, dim=-1)

        o = torch.matmul(a, v.permute(0, 2, 1, 3).to(a.dtype)).transpose(-2, -3).flatten(-2)  # (B, N, H*C)
        o_pt = torch.sum(a[..., None, :, :, None] * v_pts.permute(0, 2, 4, 1, 3)[..., None, :, :], dim=-2)
        o_pt = o_pt.permute(0, 3, 1, 4, 2)  # (B, N, H, PV, 3)
        o_pt = invert_apply(rot[..., None, None, :, :], trans[..., None, None, :], o_pt)
        o_pt_norm = torch.sqrt(torch.sum(o_pt**2, dim=-1) + 1e-8).flatten(-2)
        o_pt = o_pt.reshape(*o_pt.shape[:-3], -1, 3)
        o_pair = torch.matmul(a.transpose(-2, -3), z.to(dtype=a.dtype)).flatten(-2)  # (B, N, H*C_Z)
        cat = torch.cat((o, *torch.unbind(o_pt, dim=-1), o_pt_norm, o_pair), dim=-1)
        return self.linear_out(cat.to(dtype=z.dtype))


class AngleResnet(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear_in = nn.Linear(C_S, C_RES)
        self.linear_initial = nn.Linear(C_S, C_RES)
        self.layers = nn.ModuleList(
            nn.Sequential(nn.ReLU(), nn.Linear(C_RES, C_RES), nn.ReLU(), nn.Linear(C_RES, C_RES))
            for _ in range(2)
        )
        self.linear_out = nn.Linear(C_RES, ANGLES * 2)

    def forward(self, s, s_initial):
        a = self.linear_in(F.relu(s)) + self.linear_initial(F.relu(s_initial))
        for layer in self.layers:
            a = a + layer(a)
        un = self.linear_out(F.relu(a)).view(*a.shape[:-1], ANGLES, 2)
        norm = torch.sqrt(torch.clamp(torch.sum(un.float() ** 2, dim=-1, keepdim=True), min=1e-12))
        return un, un / norm


class StructureModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer_norm_s = nn.LayerNorm(C_S)
        self.layer_norm_z = nn.LayerNorm(C_Z)
        self.linear_in = nn.Linear(C_S, C_S)
        self.ipa = IPA()
        self.ipa_dropout = nn.Dropout(0.1)
        self.layer_norm_ipa = nn.LayerNorm(C_S)
        self.transition = nn.Sequential(
            nn.Linear(C_S, C_S), nn.ReLU(), nn.Linear(C_S, C_S), nn.ReLU(), nn.Linear(C_S, C_S)
        )
        self.transition_norm = nn.LayerNorm(C_S)
        self.bb_update = nn.Linear(C_S, 6)
        self.angle_resnet = AngleResnet()

    def forward(self, s, z, mask):
        s = self.layer_norm_s(s)
        z = self.layer_norm_z(z)
        s_initial = s
        s = self.linear_in(s)
        bsz, n = s.shape[:2]
        rot = torch.eye(3, device=s.device).expand(bsz, n, 3, 3)
        trans = torch.zeros(bsz, n, 3, device=s.device)
        frames_r, frames_t, angles_un, angles = [], [], [], []
        for _ in range(BLOCKS):
            s = s + self.ipa(s, z, rot, trans, mask)
            s = self.layer_norm_ipa(self.ipa_dropout(s))
            s = self.transition_norm(s + self.transition(s))
            upd = self.bb_update(s).float()
            quat = torch.cat([torch.ones_like(upd[..., :1]), upd[..., :3]], dim=-1)
            new_rot = rot_matmul(rot, quat_to_rot(quat))
            trans = rot_vec_mul(rot, upd[..., 3:]) + trans
            rot = new_rot
            un, ang = self.angle_resnet(s, s_initial)
            frames_r.append(rot)
            frames_t.append(trans * TRANS_SCALE)
            angles_un.append(un)
            angles.append(ang)
            rot = rot.detach()  # stop_rot_gradient
        return torch.stack(frames_r), torch.stack(frames_t), torch.stack(angles_un), torch.stack(angles)


def fape(pred_r, pred_t, tgt_r, tgt_t, clamp=10.0, scale=10.0, eps=1e-4):
    # every frame's inverse applied to every C-alpha (the frame origins): (..., N_frames, N_pos, 3)
    local_pred = invert_apply(pred_r[..., :, None, :, :], pred_t[..., :, None, :], pred_t[..., None, :, :])
    local_tgt = invert_apply(tgt_r[..., :, None, :, :], tgt_t[..., :, None, :], tgt_t[..., None, :, :])
    err = torch.sqrt(torch.sum((local_pred - local_tgt) ** 2, dim=-1) + eps)
    err = torch.clamp(err, 0, clamp) / scale
    return err.mean(dim=(-1, -2))


def synthetic_chain(bsz, n, gen):
    steps = torch.randn(bsz, n, 3, generator=gen)
    trans = torch.cumsum(3.8 * steps / steps.norm(dim=-1, keepdim=True), dim=1)
    rot = quat_to_rot(torch.randn(bsz, n, 4, generator=gen))
    tors = torch.randn(bsz, n, ANGLES, 2, generator=gen)
    return rot, trans, tors / tors.norm(dim=-1, keepdim=True)


model = StructureModule().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-6)
print(sum(p.numel() for p in model.parameters()) / 1e6, "M parameters")
report("structure_module_built")

cpu = torch.Generator().manual_seed(71)
BSZ, N = 2, 384
mask = torch.ones(BSZ, N, device=dev)
for step in range(4):
    s = torch.randn(BSZ, N, C_S, device=dev)
    z = torch.randn(BSZ, N, N, C_Z, device=dev)
    tr, tt, ttors = (x.to(dev) for x in synthetic_chain(BSZ, N, cpu))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        fr, ft, un, ang = model(s, z, mask)
    l_fape = fape(fr, ft, tr, tt).mean()
    l_tors = ((ang - ttors) ** 2).sum(-1).mean()
    l_norm = (torch.sqrt(torch.sum(un.float() ** 2, dim=-1)) - 1).abs().mean()
    loss = l_fape + 0.5 * l_tors + 0.02 * l_norm
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 4))
report("train_ipa_fape_4_steps")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    n = 768
    s = torch.randn(1, n, C_S, device=dev)
    z = torch.randn(1, n, n, C_Z, device=dev)
    fr, ft, un, ang = model(s, z, torch.ones(1, n, device=dev))
    ca = ft[-1]
    print("predicted", tuple(ca.shape), round(float(ca.norm(dim=-1).mean()), 3))
report("no_grad_768_residue_prediction")
print("done")
