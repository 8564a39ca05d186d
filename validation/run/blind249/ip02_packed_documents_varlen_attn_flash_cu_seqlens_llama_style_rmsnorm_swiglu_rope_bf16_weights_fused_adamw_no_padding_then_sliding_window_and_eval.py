"""Packed-document pretraining without padding through `torch.nn.attention.varlen.varlen_attn` (PyTorch
2.10+): a 4-layer Llama-style LM (d 1024, 16 heads of 64, SwiGLU 2816, RMSNorm, RoPE, vocab 32000,
bf16 weights) fed one flat stream of 12 documents of fixed lengths (16,384 tokens) with their
`cu_seqlens` (int32); attention goes through the custom op `torch_attn::_varlen_attn` (flash varlen
forward and backward). fused AdamW, two steps causal; then two steps with a sliding window of 256
(`window_size=(255, 0)`); then evaluation under no_grad on half the stream.

Document lengths are fixed: no value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.varlen import varlen_attn

torch.manual_seed(2492)
V, D, H, HD, FF, L = 32000, 1024, 16, 64, 2816, 4
LENS = [2048, 512, 1536, 1024, 3072, 256, 1792, 768, 2304, 1280, 640, 1152]
N = sum(LENS)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def rope(x, pos):
    inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, device=x.device, dtype=torch.float32) / HD))
    ang = pos[:, None].float() * inv[None]
    cos, sin = ang.cos()[:, None, :].to(x.dtype), ang.sin()[:, None, :].to(x.dtype)
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.gate_up, self.down = nn.Linear(D, 2 * FF, bias=False), nn.Linear(FF, D, bias=False)

    def forward(self, x, pos, cu, maxlen, window):
        q, k, v = self.qkv(self.n1(x)).view(-1, 3, H, HD).unbind(1)
        q, k = rope(q, pos), rope(k, pos)
        a = varlen_attn(q, k, v, cu, cu, maxlen, maxlen, window_size=window)
        x = x + self.o(a.reshape(-1, D))
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.nf = nn.RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, ids, pos, cu, maxlen, window=(-1, 0)):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x, pos, cu, maxlen, window)
        return self.head(self.nf(x))


def stream(lens):
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    pos = torch.cat([torch.arange(n, device="cuda") for n in lens])
    ids = torch.randint(0, V, (sum(lens),), device="cuda")
    return ids, pos, cu, max(lens)


model = LM().cuda().to(torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
ids, pos, cu, maxlen = stream(LENS)
tgt = torch.roll(ids, -1)
report("setup")


def train(window):
    for _ in range(2):
        logits = model(ids, pos, cu, maxlen, window)
        loss = F.cross_entropy(logits.float(), tgt)
        del logits
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss


train((-1, 0))
report("train_varlen_causal")
train((255, 0))
report("train_varlen_sliding_window_256")

model.eval()
half = LENS[:6]
e_ids, e_pos, e_cu, e_max = stream(half)
with torch.no_grad():
    logits = model(e_ids, e_pos, e_cu, e_max)
    nll = F.cross_entropy(logits.float(), torch.roll(e_ids, -1))
    del logits, nll
report("eval_no_grad_half_stream")
