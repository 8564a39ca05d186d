"""An Evoformer stack after AlphaFold 2 (Jumper et al. 2021, supplementary Algorithms 6-15) and
aqlaboratory/openfold's EvoformerBlock, written by hand: MSA representation (1 x 128 sequences x 256
residues x 256 channels) and pair representation (256 x 256 x 128 channels). Each block: MSA row-wise
gated self-attention with pair bias (8 heads of 32), MSA column-wise gated self-attention (8 heads),
MSA transition (x4), the outer product mean (32 channels, einsum 'bsic,bsjd->bijcd' then a Linear of
32 * 32 -> 128), triangle multiplicative update using outgoing and then incoming edges (128 channels,
sigmoid gates, einsum 'bikc,bjkc->bijc' and 'bkic,bkjc->bijc'), triangle self-attention around the
starting and the ending node (4 heads of 32, the triangle bias from the pair, the ending node by
transposing), pair transition (x4); 4 blocks, each under torch.utils.checkpoint (use_reentrant=False)
as OpenFold trains; input embedder (target features 22, MSA features 49, relative positions clipped to
+-32 as one-hot into a Linear); a distogram head (64 bins) and a masked-MSA head (23 classes) as the
losses. bf16 autocast, AdamW (lr 1e-3, eps 1e-6) with gradient clipping 0.1; the first step its own
phase, then 2 steps; then inference under inference_mode with 3 recycling iterations (the previous
pair and first MSA row, layer-normed, added back) on a 384-residue target with 64 sequences; then an
fp32 no_grad forward of one block alone at 256 residues; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17903)
if SMALL:
    C_M, C_Z, N_SEQ, N_RES, BLOCKS, STEPS, INF_SEQ, INF_RES = 16, 8, 4, 12, 2, 2, 4, 16
else:
    C_M, C_Z, N_SEQ, N_RES, BLOCKS, STEPS, INF_SEQ, INF_RES = 256, 128, 128, 256, 4, 3, 64, 384
device = "cuda" if torch.cuda.is_available() else "cpu"


class GatedAttention(nn.Module):
    def __init__(self, c_in, heads, head_dim, c_bias=None):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.norm = nn.LayerNorm(c_in)
        self.q = nn.Linear(c_in, heads * head_dim, bias=False)
        self.k = nn.Linear(c_in, heads * head_dim, bias=False)
        self.v = nn.Linear(c_in, heads * head_dim, bias=False)
        self.g = nn.Linear(c_in, heads * head_dim)
        self.o = nn.Linear(heads * head_dim, c_in)
        if c_bias is not None:
            self.bias_norm = nn.LayerNorm(c_bias)
            self.bias = nn.Linear(c_bias, heads, bias=False)

    def forward(self, x, pair=None):  # x: [..., S, L, c] attends over L
        x = self.norm(x)
        *lead, n, _ = x.shape
        q = self.q(x).view(*lead, n, self.heads, self.head_dim).transpose(-2, -3)
        k = self.k(x).view(*lead, n, self.heads, self.head_dim).transpose(-2, -3)
        v = self.v(x).view(*lead, n, self.heads, self.head_dim).transpose(-2, -3)
        logits = torch.matmul(q * self.head_dim**-0.5, k.transpose(-1, -2))  # [..., S, H, L, L]
        if pair is not None:
            b = self.bias(self.bias_norm(pair)).permute(0, 3, 1, 2)  # [B, H, L, L]
            logits = logits + b.unsqueeze(1)
        a = torch.softmax(logits, dim=-1)
        o = torch.matmul(a, v).transpose(-2, -3).reshape(*lead, n, self.heads * self.head_dim)
        o = torch.sigmoid(self.g(x)) * o
        return self.o(o)


class Transition(nn.Module):
    def __init__(self, c, n=4):
        super().__init__()
        self.norm = nn.LayerNorm(c)
        self.lin1 = nn.Linear(c, n * c)
        self.lin2 = nn.Linear(n * c, c)

    def forward(self, x):
        return self.lin2(F.relu(self.lin1(self.norm(x))))


class OuterProductMean(nn.Module):
    def __init__(self, c_m, c_z, c_hidden=32):
        super().__init__()
        self.norm = nn.LayerNorm(c_m)
        self.a = nn.Linear(c_m, c_hidden)
        self.b = nn.Linear(c_m, c_hidden)
        self.out = nn.Linear(c_hidden * c_hidden, c_z)

    def forward(self, m):  # m: [B, S, L, c_m]
        m = self.norm(m)
        a, b = self.a(m), self.b(m)
        outer = torch.einsum("bsic,bsjd->bijcd", a, b)
        outer = outer.reshape(*outer.shape[:3], -1)
        return self.out(outer) / m.shape[1]


class TriangleMultiplication(nn.Module):
    def __init__(self, c_z, c_hidden, outgoing):
        super().__init__()
        self.outgoing = outgoing
        self.norm_in = nn.LayerNorm(c_z)
        self.a_p, self.a_g = nn.Linear(c_z, c_hidden), nn.Linear(c_z, c_hidden)
        self.b_p, self.b_g = nn.Linear(c_z, c_hidden), nn.Linear(c_z, c_hidden)
        self.norm_out = nn.LayerNorm(c_hidden)
        self.z = nn.Linear(c_hidden, c_z)
        self.g = nn.Linear(c_z, c_z)

    def forward(self, z):
        z = self.norm_in(z)
        a = torch.sigmoid(self.a_g(z)) * self.a_p(z)
        b = torch.sigmoid(self.b_g(z)) * self.b_p(z)
        if self.outgoing:
            x = torch.einsum("bikc,bjkc->bijc", a, b)
        else:
            x = torch.einsum("bkic,bkjc->bijc", a, b)
        return torch.sigmoid(self.g(z)) * self.z(self.norm_out(x))


class TriangleAttention(nn.Module):
    def __init__(self, c_z, heads, head_dim, starting):
        super().__init__()
        self.starting = starting
        self.att = GatedAttention(c_z, heads, head_dim, c_bias=c_z)

    def forward(self, z):
        if not self.starting:
            z = z.transpose(1, 2)
        # rows of the pair attend along the row; the bias is the pair itself
        out = self.att(z, pair=z)
        if not self.starting:
            out = out.transpose(1, 2)
        return out


class EvoformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.row = GatedAttention(C_M, 8, 32, c_bias=C_Z)
        self.col = GatedAttention(C_M, 8, 32)
        self.msa_trans = Transition(C_M)
        self.opm = OuterProductMean(C_M, C_Z)
        self.tri_out = TriangleMultiplication(C_Z, C_Z, True)
        self.tri_in = TriangleMultiplication(C_Z, C_Z, False)
        self.tri_att_start = TriangleAttention(C_Z, 4, 32, True)
        self.tri_att_end = TriangleAttention(C_Z, 4, 32, False)
        self.pair_trans = Transition(C_Z)
        self.drop_row = nn.Dropout(0.15)
        self.drop_pair = nn.Dropout(0.25)

    def forward(self, m, z):
        m = m + self.drop_row(self.row(m, pair=z))
        m = m + self.col(m.transpose(1, 2)).transpose(1, 2)
        m = m + self.msa_trans(m)
        z = z + self.opm(m)
        z = z + self.drop_pair(self.tri_out(z))
        z = z + self.drop_pair(self.tri_in(z))
        z = z + self.drop_pair(self.tri_att_start(z))
        z = z + self.tri_att_end(z)
        z = z + self.pair_trans(z)
        return m, z


class MiniFold(nn.Module):
    def __init__(self):
        super().__init__()
        self.tf_i, self.tf_j, self.tf_m = nn.Linear(22, C_Z), nn.Linear(22, C_Z), nn.Linear(22, C_M)
        self.msa_m = nn.Linear(49, C_M)
        self.relpos = nn.Linear(65, C_Z)
        self.recycle_m, self.recycle_z = nn.LayerNorm(C_M), nn.LayerNorm(C_Z)
        self.blocks = nn.ModuleList([EvoformerBlock() for _ in range(BLOCKS)])
        self.distogram = nn.Linear(C_Z, 64)
        self.masked_msa = nn.Linear(C_M, 23)

    def embed(self, target_feat, msa_feat):
        n = target_feat.shape[1]
        z = self.tf_i(target_feat)[:, :, None] + self.tf_j(target_feat)[:, None, :]
        r = torch.arange(n, device=target_feat.device)
        d = (r[None, :] - r[:, None]).clamp(-32, 32) + 32
        z = z + self.relpos(F.one_hot(d, 65).float())[None]
        m = self.msa_m(msa_feat) + self.tf_m(target_feat)[:, None]
        return m, z

    def forward(self, target_feat, msa_feat, prev=None, ckpt=True):
        m, z = self.embed(target_feat, msa_feat)
        if prev is not None:
            m = torch.cat([m[:, :1] + self.recycle_m(prev[0]), m[:, 1:]], dim=1)
            z = z + self.recycle_z(prev[1])
        for blk in self.blocks:
            if ckpt and self.training:
                m, z = checkpoint(blk, m, z, use_reentrant=False)
            else:
                m, z = blk(m, z)
        return m, z


def features(n_seq, n_res):
    aatype = torch.randint(0, 21, (1, n_res), device=device)
    target_feat = F.one_hot(aatype, 22).float()
    msa = torch.randint(0, 23, (1, n_seq, n_res), device=device)
    msa_feat = torch.cat([F.one_hot(msa, 23).float(), torch.rand(1, n_seq, n_res, 26, device=device)], dim=-1)
    dist_bins = torch.randint(0, 64, (1, n_res, n_res), device=device)
    return target_feat, msa_feat, msa, dist_bins


model = MiniFold().to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-6, weight_decay=0.0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    target_feat, msa_feat, msa, dist_bins = features(N_SEQ, N_RES)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        m, z = model(target_feat, msa_feat)
        d_logits = model.distogram(z + z.transpose(1, 2))
        msa_logits = model.masked_msa(m)
    loss = F.cross_entropy(d_logits.float().reshape(-1, 64), dist_bins.reshape(-1))
    loss = loss + 2.0 * F.cross_entropy(msa_logits.float().reshape(-1, 23), msa.reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del target_feat, msa_feat, msa, dist_bins, m, z, d_logits, msa_logits, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    target_feat, msa_feat, _, _ = features(INF_SEQ, INF_RES)
    prev = None
    for _cycle in range(3):
        m, z = model(target_feat, msa_feat, prev=prev)
        prev = (m[:, :1].float(), z.float())
    probs = torch.softmax(model.distogram(z + z.transpose(1, 2)).float(), dim=-1)
print(f"inference distogram {tuple(probs.shape)} mean max {probs.max(-1).values.mean().item():.4f}")
del target_feat, msa_feat, prev, m, z, probs
if device == "cuda":
    print(f"inference peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    target_feat, msa_feat, _, _ = features(N_SEQ // 2, N_RES)
    m, z = model.embed(target_feat, msa_feat)
    m, z = model.blocks[0](m, z)
print(f"one block fp32 m {tuple(m.shape)} z {tuple(z.shape)} {z.float().std().item():.4f}")
if device == "cuda":
    print(
        f"block allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
