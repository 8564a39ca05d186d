"""An AlphaFold2-style Evoformer stack written by hand (MSA and pair representations), trained on random data.

Per block (as in AlphaFold2 supplement Algorithm 6): MSA row-wise gated self-attention with pair bias
(SDPA with the projected pair as a float attn_mask), MSA column-wise gated self-attention (einsum and softmax
by hand), MSA transition, outer product mean (einsum over the MSA, mean, linear), triangle multiplicative
update outgoing and incoming (einsum "bikc,bjkc->bijc" / "bkic,bkjc->bijc"), triangle self-attention around
the starting and the ending node (SDPA over 5-D tensors with a broadcast bias), pair transition. Heads: a
distogram head (64 bins over the symmetrised pair) and a masked-MSA head (23 classes).

Sizes: MSA depth 128, 256 residues, c_m 256, c_z 128, 8 blocks. Training: bf16 autocast, every block under
torch.utils.checkpoint(use_reentrant=False), Adam (lr 1e-3, eps 1e-6), clipping at 0.1.

Phases: the first step; 2 more steps; inference under no_grad at 384 residues with 3 recycling iterations
(pair and first MSA row recycled through LayerNorms) and the triangle attention chunked over 64 rows; then
fp32 without checkpointing on a 128-residue crop with a 64-deep MSA, foreach AdamW, 2 steps. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2062)
if SMALL:
    S, L, CM, CZ, BLOCKS, L_INF, CHUNK = 8, 16, 32, 16, 2, 24, 8
else:
    S, L, CM, CZ, BLOCKS, L_INF, CHUNK = 128, 256, 256, 128, 8, 384, 64
HEADS_M, HEADS_Z, DH = 8, 4, 32
N_AA, N_BINS = 23, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class MSARowAttentionWithPairBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm_m = nn.LayerNorm(CM)
        self.norm_z = nn.LayerNorm(CZ)
        self.bias = nn.Linear(CZ, HEADS_M, bias=False)
        self.qkv = nn.Linear(CM, 3 * HEADS_M * DH, bias=False)
        self.gate = nn.Linear(CM, HEADS_M * DH)
        self.out = nn.Linear(HEADS_M * DH, CM)

    def forward(self, m, z):
        b, s, l, _ = m.shape
        m = self.norm_m(m)
        q, k, v = self.qkv(m).view(b, s, l, 3, HEADS_M, DH).permute(3, 0, 1, 4, 2, 5).unbind(0)
        bias = self.bias(self.norm_z(z)).permute(0, 3, 1, 2).unsqueeze(1)  # (b, 1, h, l, l)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # (b, s, h, l, d)
        o = o.transpose(2, 3).reshape(b, s, l, HEADS_M * DH)
        return self.out(torch.sigmoid(self.gate(m)) * o)


class MSAColumnAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(CM)
        self.q = nn.Linear(CM, HEADS_M * DH, bias=False)
        self.k = nn.Linear(CM, HEADS_M * DH, bias=False)
        self.v = nn.Linear(CM, HEADS_M * DH, bias=False)
        self.gate = nn.Linear(CM, HEADS_M * DH)
        self.out = nn.Linear(HEADS_M * DH, CM)

    def forward(self, m):
        b, s, l, _ = m.shape
        m = self.norm(m)
        q = self.q(m).view(b, s, l, HEADS_M, DH) / math.sqrt(DH)
        k = self.k(m).view(b, s, l, HEADS_M, DH)
        v = self.v(m).view(b, s, l, HEADS_M, DH)
        a = torch.einsum("bsihd,btihd->bihst", q, k).softmax(dim=-1)
        o = torch.einsum("bihst,btihd->bsihd", a, v).reshape(b, s, l, HEADS_M * DH)
        return self.out(torch.sigmoid(self.gate(m)) * o)


class Transition(nn.Module):
    def __init__(self, c, n=4):
        super().__init__()
        self.norm = nn.LayerNorm(c)
        self.lin1 = nn.Linear(c, n * c)
        self.lin2 = nn.Linear(n * c, c)

    def forward(self, x):
        return self.lin2(F.relu(self.lin1(self.norm(x))))


class OuterProductMean(nn.Module):
    def __init__(self, c=32):
        super().__init__()
        self.norm = nn.LayerNorm(CM)
        self.a = nn.Linear(CM, c)
        self.b = nn.Linear(CM, c)
        self.out = nn.Linear(c * c, CZ)

    def forward(self, m):
        s = m.shape[1]
        m = self.norm(m)
        a, b = self.a(m), self.b(m)
        outer = torch.einsum("bsic,bsjd->bijcd", a, b).flatten(-2) / s
        return self.out(outer)


class TriangleMultiplication(nn.Module):
    def __init__(self, outgoing, c=128):
        super().__init__()
        self.outgoing = outgoing
        self.norm_in = nn.LayerNorm(CZ)
        self.a_proj = nn.Linear(CZ, c)
        self.a_gate = nn.Linear(CZ, c)
        self.b_proj = nn.Linear(CZ, c)
        self.b_gate = nn.Linear(CZ, c)
        self.norm_out = nn.LayerNorm(c)
        self.out = nn.Linear(c, CZ)
        self.gate = nn.Linear(CZ, CZ)

    def forward(self, z):
        z = self.norm_in(z)
        a = torch.sigmoid(self.a_gate(z)) * self.a_proj(z)
        b = torch.sigmoid(self.b_gate(z)) * self.b_proj(z)
        if self.outgoing:
            x = torch.einsum("bikc,bjkc->bijc", a, b)
        else:
            x = torch.einsum("bkic,bkjc->bijc", a, b)
        return torch.sigmoid(self.gate(z)) * self.out(self.norm_out(x))


class TriangleAttention(nn.Module):
    def __init__(self, starting):
        super().__init__()
        self.starting = starting
        self.norm = nn.LayerNorm(CZ)
        self.bias = nn.Linear(CZ, HEADS_Z, bias=False)
        self.qkv = nn.Linear(CZ, 3 * HEADS_Z * DH, bias=False)
        self.gate = nn.Linear(CZ, HEADS_Z * DH)
        self.out = nn.Linear(HEADS_Z * DH, CZ)
        self.chunk = None

    def forward(self, z):
        if not self.starting:
            z = z.transpose(1, 2)
        b, l, _, _ = z.shape
        z = self.norm(z)
        bias = self.bias(z).permute(0, 3, 1, 2).unsqueeze(1)  # (b, 1, h, j, k)
        q, k, v = self.qkv(z).view(b, l, l, 3, HEADS_Z, DH).permute(3, 0, 1, 4, 2, 5).unbind(0)
        if self.chunk is None:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        else:
            o = torch.cat(
                [
                    F.scaled_dot_product_attention(
                        q[:, i : i + self.chunk],
                        k[:, i : i + self.chunk],
                        v[:, i : i + self.chunk],
                        attn_mask=bias,
                    )
                    for i in range(0, l, self.chunk)
                ],
                dim=1,
            )
        o = o.transpose(2, 3).reshape(b, l, l, HEADS_Z * DH)
        o = self.out(torch.sigmoid(self.gate(z)) * o)
        if not self.starting:
            o = o.transpose(1, 2)
        return o


class EvoformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.row = MSARowAttentionWithPairBias()
        self.col = MSAColumnAttention()
        self.msa_trans = Transition(CM)
        self.opm = OuterProductMean()
        self.tri_out = TriangleMultiplication(True)
        self.tri_in = TriangleMultiplication(False)
        self.tri_att_start = TriangleAttention(True)
        self.tri_att_end = TriangleAttention(False)
        self.pair_trans = Transition(CZ)

    def forward(self, m, z):
        m = m + self.row(m, z)
        m = m + self.col(m)
        m = m + self.msa_trans(m)
        z = z + self.opm(m)
        z = z + self.tri_out(z)
        z = z + self.tri_in(z)
        z = z + self.tri_att_start(z)
        z = z + self.tri_att_end(z)
        z = z + self.pair_trans(z)
        return m, z


class Evoformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.msa_embed = nn.Embedding(N_AA + 1, CM)
        self.target_embed = nn.Embedding(N_AA, CZ)
        self.left = nn.Linear(CZ, CZ)
        self.relpos = nn.Embedding(65, CZ)
        self.recycle_norm_m = nn.LayerNorm(CM)
        self.recycle_norm_z = nn.LayerNorm(CZ)
        self.blocks = nn.ModuleList([EvoformerBlock() for _ in range(BLOCKS)])
        self.disto = nn.Linear(CZ, N_BINS)
        self.masked_msa = nn.Linear(CM, N_AA)
        self.use_checkpoint = True

    def forward(self, msa, target, prev=None):
        l = target.shape[1]
        t = self.target_embed(target)
        z = self.left(t).unsqueeze(2) + t.unsqueeze(1)
        idx = torch.arange(l, device=target.device)
        z = z + self.relpos((idx[None, :] - idx[:, None]).clamp(-32, 32) + 32)
        m = self.msa_embed(msa)
        if prev is not None:
            m = torch.cat([m[:, :1] + self.recycle_norm_m(prev[0]), m[:, 1:]], dim=1)
            z = z + self.recycle_norm_z(prev[1])
        for blk in self.blocks:
            if self.use_checkpoint and self.training:
                m, z = checkpoint(blk, m, z, use_reentrant=False)
            else:
                m, z = blk(m, z)
        return m, z


def batch(s, l):
    msa = torch.randint(0, N_AA, (1, s, l), device=device)
    target = msa[:, 0].clone()
    masked = torch.rand(1, s, l, device=device) < 0.15
    msa_in = msa.masked_fill(masked, N_AA)
    labels = msa.masked_fill(~masked, -100)
    coords = torch.randn(1, l, 3, device=device) * 10
    bins = (torch.cdist(coords, coords) / 22 * N_BINS).long().clamp(max=N_BINS - 1)
    return msa_in, target, labels, bins


def loss_fn(model, msa_in, target, labels, bins):
    m, z = model(msa_in, target)
    logits = model.disto(z + z.transpose(1, 2)).float()
    disto = F.cross_entropy(logits.reshape(-1, N_BINS), bins.reshape(-1))
    mlm = F.cross_entropy(model.masked_msa(m).float().reshape(-1, N_AA), labels.reshape(-1))
    return disto + 2.0 * mlm


model = Evoformer().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-6)
model.train()
for step in range(3):
    data = batch(S, L)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = loss_fn(model, *data)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0:
        report("first step")
report("bf16 checkpointed training")

model.eval()
for blk in model.blocks:
    blk.tri_att_start.chunk = CHUNK
    blk.tri_att_end.chunk = CHUNK
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    msa_in, target, _, _ = batch(S, L_INF)
    prev = None
    for cycle in range(3):
        m, z = model(msa_in, target, prev)
        prev = (m[:, :1].float(), z.float())
        del m, z
    probs = model.disto(prev[1]).float().softmax(-1)
    print(
        f"inference distogram {tuple(probs.shape)} "
        f"entropy {(-(probs * probs.clamp_min(1e-9).log()).sum(-1)).mean():.3f}"
    )
del prev, probs
report("recycling inference")

for blk in model.blocks:
    blk.tri_att_start.chunk = None
    blk.tri_att_end.chunk = None
model.train()
model.use_checkpoint = False
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, eps=1e-6, foreach=True)
for step in range(2):
    loss = loss_fn(model, *batch(S // 2, L // 2))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"fp32 crop step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
