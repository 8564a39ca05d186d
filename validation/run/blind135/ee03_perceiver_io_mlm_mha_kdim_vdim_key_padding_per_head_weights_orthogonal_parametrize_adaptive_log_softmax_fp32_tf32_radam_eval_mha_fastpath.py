"""A Perceiver IO masked language model built from nn.MultiheadAttention: 2,048 input tokens
embedded at 512 wide with key-padding masks from per-sequence lengths, a 256 x 1,024 latent array
that cross-attends to them (kdim = vdim = 512, need_weights=False), 6 latent self-attention blocks
(batch_first MHA + GELU MLP, pre-LN) of which the last returns per-head attention weights
(need_weights=True, average_attn_weights=False) for an attention-entropy regulariser, an output
query array (position embeddings) cross-attending to the latents, a 1,024 x 1,024 projection kept
orthogonal by nn.utils.parametrizations.orthogonal, and nn.AdaptiveLogSoftmaxWithLoss over a
32,000-token vocabulary (cutoffs 2,000 and 10,000, div_value 4) on the 15% masked positions;
fp32 with TF32 matmuls, RAdam (decoupled weight decay); 3 steps at batch 24, then under
inference_mode full log-probabilities (log_prob) of 2,048 positions and a latent self-attention
pass that takes MultiheadAttention's fast path; 5 phases."""

import os

import torch
import torch.nn as nn
from torch.nn.utils import parametrizations

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13503)
B, N, DIN, NL, DL, DEPTH, V = (2, 64, 32, 8, 64, 2, 12000) if SMALL else (24, 2048, 512, 256, 1024, 6, 32000)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
PAD, MASK = 0, 1


class LatentBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DL)
        self.attn = nn.MultiheadAttention(DL, 16, dropout=0.0, batch_first=True)
        self.ln2 = nn.LayerNorm(DL)
        self.mlp = nn.Sequential(nn.Linear(DL, 4 * DL), nn.GELU(), nn.Linear(4 * DL, DL))

    def forward(self, z, want_weights=False):
        h = self.ln1(z)
        a, w = self.attn(h, h, h, need_weights=want_weights, average_attn_weights=False)
        z = z + a
        return z + self.mlp(self.ln2(z)), w


class PerceiverIO(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, DIN, padding_idx=PAD)
        self.pos = nn.Parameter(torch.randn(N, DIN) * 0.02)
        self.latents = nn.Parameter(torch.randn(NL, DL) * 0.02)
        self.ln_in = nn.LayerNorm(DIN)
        self.ln_lat = nn.LayerNorm(DL)
        self.enc = nn.MultiheadAttention(DL, 8, kdim=DIN, vdim=DIN, batch_first=True)
        self.blocks = nn.ModuleList(LatentBlock() for _ in range(DEPTH))
        self.queries = nn.Parameter(torch.randn(N, DL) * 0.02)
        self.ln_q = nn.LayerNorm(DL)
        self.dec = nn.MultiheadAttention(DL, 8, batch_first=True)
        self.proj = parametrizations.orthogonal(nn.Linear(DL, DL))
        self.head = nn.AdaptiveLogSoftmaxWithLoss(DL, V, cutoffs=[2000, 10000], div_value=4.0)

    def forward(self, tokens, pad):
        b = tokens.size(0)
        x = self.ln_in(self.tok(tokens) + self.pos)
        lat = self.latents.expand(b, -1, -1)
        z, _ = self.enc(self.ln_lat(lat), x, x, key_padding_mask=pad, need_weights=False)
        z = z + lat
        weights = None
        for i, blk in enumerate(self.blocks):
            z, w = blk(z, want_weights=self.training and i == len(self.blocks) - 1)
            weights = w if w is not None else weights
        q = self.ln_q(self.queries).expand(b, -1, -1)
        o, _ = self.dec(q, z, z, need_weights=False)
        return self.proj(o + q), weights


def batch(n):
    lengths = torch.randint(N // 2, N + 1, (n,), device=device)
    tokens = torch.randint(2, V, (n, N), device=device)
    pad = torch.arange(N, device=device)[None] >= lengths[:, None]
    tokens = tokens.masked_fill(pad, PAD)
    chosen = (torch.rand(n, N, device=device) < 0.15) & ~pad
    return tokens.masked_fill(chosen, MASK), tokens, pad, chosen


model = PerceiverIO().to(device)
opt = torch.optim.RAdam(model.parameters(), lr=3e-4, weight_decay=0.01, decoupled_weight_decay=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    inp, tokens, pad, chosen = batch(B)
    h, attn = model(inp, pad)
    out = model.head(h[chosen], tokens[chosen])
    ent = -(attn * attn.clamp_min(1e-9).log()).sum(-1).mean()
    loss = out.loss + 1e-3 * ent
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.4f} ent {ent.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode():
    inp, tokens, pad, chosen = batch(1)
    h, _ = model(inp, pad)
    logp = model.head.log_prob(h[0])
    nll = -logp.gather(1, tokens[0][:, None]).mean()
if device == "cuda":
    print(
        f"log_prob nll {nll.item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    z = torch.randn(4 * B, NL, DL, device=device)
    for blk in model.blocks:
        z, _ = blk(z)
if device == "cuda":
    print(
        f"latents {tuple(z.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
