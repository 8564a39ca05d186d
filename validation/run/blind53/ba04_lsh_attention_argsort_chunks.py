"""Reformer-style LSH attention written by hand: shared query-key vectors hashed by random rotations
into 64 buckets (2 rounds), tokens `argsort`ed by bucket, attention within chunks of 128 and with the
previous chunk, results un-sorted by `gather` and the rounds combined by `logsumexp` weights;
4 layers of width 512 (8 heads) over batch 4 x 16,384 tokens, fp32, Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5304)
B, T, D, NH, L, C, NB, R = (1, 256, 32, 2, 1, 32, 8, 2) if SMALL else (4, 16384, 512, 8, 4, 128, 64, 2)
HD = D // NH
device = "cuda" if torch.cuda.is_available() else "cpu"


def lsh_attention(qk, v, rotations):
    b, h, t, d = qk.shape
    rotated = torch.einsum("bhtd,hrdk->bhrtk", F.normalize(qk, dim=-1), rotations)
    buckets = torch.cat([rotated, -rotated], -1).argmax(-1)  # b h r t
    key = buckets * t + torch.arange(t, device=qk.device)
    order = key.argsort(-1)
    undo = order.argsort(-1)
    idx = order[..., None].expand(-1, -1, -1, -1, d)
    sq = torch.gather(qk[:, :, None].expand(-1, -1, R, -1, -1), 3, idx)
    sv = torch.gather(v[:, :, None].expand(-1, -1, R, -1, -1), 3, idx)
    sq = sq.reshape(b, h, R, t // C, C, d)
    sv = sv.reshape(b, h, R, t // C, C, d)
    sk = F.normalize(sq, dim=-1)
    k2 = torch.cat([sk, sk.roll(1, 3)], 4)
    v2 = torch.cat([sv, sv.roll(1, 3)], 4)
    scores = sq @ k2.transpose(-1, -2) / d**0.5
    lse = scores.logsumexp(-1, keepdim=True)
    out = (scores - lse).exp() @ v2
    out = out.reshape(b, h, R, t, d)
    lse = lse.reshape(b, h, R, t, 1)
    out = torch.gather(out, 3, undo[..., None].expand(-1, -1, -1, -1, d))
    lse = torch.gather(lse, 3, undo[..., None])
    weights = torch.softmax(lse, dim=2)
    return (out * weights).sum(2)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qk, self.v, self.o = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.register_buffer("rotations", torch.randn(NH, R, HD, NB // 2))

    def forward(self, x):
        h = self.norm1(x)
        qk = self.qk(h).view(B, T, NH, HD).transpose(1, 2)
        v = self.v(h).view(B, T, NH, HD).transpose(1, 2)
        a = lsh_attention(qk, v, self.rotations).transpose(1, 2).reshape(B, T, D)
        x = x + self.o(a)
        return x + self.ff(self.norm2(x))


model = nn.Sequential(*[Layer() for _ in range(L)]).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, T, D, device=device)
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
