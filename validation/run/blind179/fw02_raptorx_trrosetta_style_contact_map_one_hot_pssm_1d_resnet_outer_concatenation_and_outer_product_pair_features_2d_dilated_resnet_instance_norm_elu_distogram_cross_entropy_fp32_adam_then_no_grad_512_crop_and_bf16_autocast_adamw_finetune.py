"""Protein contact and distance prediction after RaptorX-Contact (Wang et al. 2017, a 1-D ResNet over the
sequence features, then pairwise features by outer concatenation, then a deep 2-D ResNet) and trRosetta
(Yang et al. 2020: dilated 2-D residual blocks with instance normalization and ELU, cycling dilations 1,
2, 4, 8, 16, and a 37-bin distogram), written by hand. Input per residue: the one-hot sequence (21) and a
PSSM-like profile (20) from seeded `torch.rand`; a 1-D ResNet of 6 blocks (kernel 17, 64 channels,
BatchNorm1d, ReLU); pair features: the outer concatenation [x_i, x_j, (x_i + x_j) / 2] plus a low-rank
outer product (einsum 'bci,bcj->bcij' over 32 channels) and the 1-D features' mean, projected by a 1 x 1
Conv2d to 64 channels; 20 dilated 2-D residual blocks (3 x 3, 64 channels, InstanceNorm2d(affine), ELU,
dropout 0.15); heads: 37 distance bins and 25 omega bins (1 x 1 convolutions after symmetrizing), cross
entropy with ignore_index on the masked pairs (seeded-length padding). fp32, Adam (lr 1e-3) with
crops of 4 x 256 residues; the first step its own phase, then 3 steps; then a no_grad prediction on 2
proteins of 512 residues (softmax, expected distance, top-L/5 contacts); then a fine-tune of the same
model under bf16 autocast with AdamW (lr 3e-4) and channels_last, 3 steps at crops of 2 x 320; 4
phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17902)
if SMALL:
    C1, C2, BLOCKS1, BLOCKS2, B, L, STEPS, EVAL_B, EVAL_L, FT_B, FT_L = 8, 8, 2, 3, 2, 24, 2, 1, 32, 1, 20
else:
    C1, C2, BLOCKS1, BLOCKS2, B, L, STEPS, EVAL_B, EVAL_L, FT_B, FT_L = (
        64,
        64,
        6,
        20,
        4,
        256,
        4,
        2,
        512,
        2,
        320,
    )
NDIST, NOMEGA = 37, 25
device = "cuda" if torch.cuda.is_available() else "cpu"


class ResBlock1d(nn.Module):
    def __init__(self, c, k=17):
        super().__init__()
        self.conv1 = nn.Conv1d(c, c, k, padding=k // 2, bias=False)
        self.bn1 = nn.BatchNorm1d(c)
        self.conv2 = nn.Conv1d(c, c, k, padding=k // 2, bias=False)
        self.bn2 = nn.BatchNorm1d(c)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(x + y)


class DilatedBlock2d(nn.Module):
    def __init__(self, c, dilation):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=dilation, dilation=dilation)
        self.norm1 = nn.InstanceNorm2d(c, affine=True)
        self.drop = nn.Dropout(0.15)
        self.conv2 = nn.Conv2d(c, c, 3, padding=dilation, dilation=dilation)
        self.norm2 = nn.InstanceNorm2d(c, affine=True)

    def forward(self, x):
        y = F.elu(self.norm1(self.conv1(x)))
        y = self.drop(y)
        y = self.norm2(self.conv2(y))
        return F.elu(x + y)


class ContactNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv1d(41, C1, 1)
        self.res1d = nn.Sequential(*[ResBlock1d(C1) for _ in range(BLOCKS1)])
        self.outer_a = nn.Conv1d(C1, 32, 1)
        self.outer_b = nn.Conv1d(C1, 32, 1)
        self.pair_in = nn.Conv2d(3 * C1 + 32 + C1, C2, 1)
        self.res2d = nn.Sequential(
            *[DilatedBlock2d(C2, d) for _ in range(BLOCKS2 // 5) for d in (1, 2, 4, 8, 16)]
        )
        self.dist = nn.Conv2d(C2, NDIST, 1)
        self.omega = nn.Conv2d(C2, NOMEGA, 1)

    def forward(self, seq1hot, pssm):
        x = self.res1d(self.stem(torch.cat([seq1hot, pssm], dim=1)))  # [B, C1, L]
        n = x.shape[-1]
        xi = x.unsqueeze(3).expand(-1, -1, -1, n)
        xj = x.unsqueeze(2).expand(-1, -1, n, -1)
        outer = torch.einsum("bci,bcj->bcij", self.outer_a(x), self.outer_b(x)) / 32
        glob = x.mean(dim=2)[:, :, None, None].expand(-1, -1, n, n)
        pair = torch.cat([xi, xj, (xi + xj) / 2, outer, glob], dim=1)
        z = self.res2d(self.pair_in(pair))
        sym = 0.5 * (z + z.transpose(2, 3))
        return self.dist(sym), self.omega(z)


def crop(bs, n):
    lengths = torch.randint(n * 3 // 4, n + 1, (bs,), device=device)
    aa = torch.randint(0, 21, (bs, n), device=device)
    seq1hot = F.one_hot(aa, 21).float().permute(0, 2, 1)
    pssm = torch.softmax(torch.rand(bs, 20, n, device=device) * 4, dim=1)
    valid = torch.arange(n, device=device)[None, :] < lengths[:, None]
    pair_valid = valid[:, :, None] & valid[:, None, :]
    dist = torch.randint(0, NDIST, (bs, n, n), device=device)
    omega = torch.randint(0, NOMEGA, (bs, n, n), device=device)
    dist = dist.masked_fill(~pair_valid, -100)
    omega = omega.masked_fill(~pair_valid, -100)
    return seq1hot, pssm, dist, omega


model = ContactNet().to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    seq1hot, pssm, dist, omega = crop(B, L)
    d_logits, o_logits = model(seq1hot, pssm)
    loss = F.cross_entropy(d_logits, dist, ignore_index=-100) + 0.5 * F.cross_entropy(
        o_logits, omega, ignore_index=-100
    )
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del seq1hot, pssm, dist, omega, d_logits, o_logits, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    seq1hot, pssm, _, _ = crop(EVAL_B, EVAL_L)
    d_logits, _ = model(seq1hot, pssm)
    prob = F.softmax(d_logits, dim=1)
    centers = torch.linspace(2.0, 20.0, NDIST, device=device)
    expected = (prob * centers[None, :, None, None]).sum(1)
    contact = prob[:, : NDIST // 3].sum(1)
    sep = torch.arange(EVAL_L, device=device)
    far = (sep[None, :] - sep[:, None]).abs() >= 6
    top = (contact * far).flatten(1).topk(EVAL_L // 5, dim=1).values
print(f"eval expected {expected.mean().item():.3f} top-L/5 {top.mean().item():.4f}")
del seq1hot, pssm, d_logits, prob, expected, contact, top
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model = model.to(memory_format=torch.channels_last)
del optimizer
ft_opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
model.train()
for step in range(3):
    seq1hot, pssm, dist, omega = crop(FT_B, FT_L)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        d_logits, o_logits = model(seq1hot, pssm)
        loss = F.cross_entropy(d_logits.float(), dist, ignore_index=-100) + 0.5 * F.cross_entropy(
            o_logits.float(), omega, ignore_index=-100
        )
    ft_opt.zero_grad(set_to_none=True)
    loss.backward()
    ft_opt.step()
    print(f"finetune step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"finetune allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
