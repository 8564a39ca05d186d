"""A sketch (stroke-sequence) model in the manner of sketch-rnn with a Transformer decoder in place
of the LSTM: each step's (dx, dy, pen) offset is embedded, 8 causal nn.TransformerEncoder layers
(512 wide, 8 heads, GELU, norm_first, a float causal mask and a key padding mask for strokes of
random length), then a mixture density head of 20 bivariate Gaussians built with
torch.distributions: MixtureSameFamily(Categorical(logits), MultivariateNormal(loc, scale_tril))
from a softplus-diagonal, tanh-correlated Cholesky factor, plus Bernoulli(logits) for the pen;
masked negative log-likelihood with a KL-free entropy bonus on the mixture weights; fp32 with TF32
matmuls, NAdam, batch 96 of 600 steps, 3 steps; then autoregressive sampling of 32 sketches for 150
steps (the whole prefix re-run each step) under no_grad, drawing from the mixture with .sample();
5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Bernoulli, Categorical, MixtureSameFamily, MultivariateNormal

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12605)
D, NL, NH, M, B, T, NS, GEN = (32, 2, 2, 3, 4, 40, 2, 10) if SMALL else (512, 8, 8, 20, 96, 600, 32, 150)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True


class SketchDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(3, D)
        self.pos = nn.Parameter(torch.randn(1, 1024, D) * 0.02)
        layer = nn.TransformerEncoderLayer(
            D, NH, 4 * D, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.enc = nn.TransformerEncoder(layer, NL, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, M * 6 + 1)

    def forward(self, x, pad=None):
        n = x.shape[1]
        h = self.inp(x) + self.pos[:, :n]
        causal = nn.Transformer.generate_square_subsequent_mask(n, device=x.device)
        h = self.enc(h, mask=causal, src_key_padding_mask=pad, is_causal=True)
        return self.head(self.norm(h))


def mixture(out):
    logits, mx, my, sx, sy, rho = out[..., : M * 6].unflatten(-1, (6, M)).unbind(-2)
    sx, sy = F.softplus(sx) + 1e-3, F.softplus(sy) + 1e-3
    rho = torch.tanh(rho) * 0.95
    zero = torch.zeros_like(sx)
    tril = torch.stack([sx, zero, rho * sy, sy * torch.sqrt(1 - rho**2)], -1).unflatten(-1, (2, 2))
    mix = MixtureSameFamily(
        Categorical(logits=logits), MultivariateNormal(torch.stack([mx, my], -1), scale_tril=tril)
    )
    return mix, Bernoulli(logits=out[..., -1])


model = SketchDecoder().to(device)
optimizer = torch.optim.NAdam(model.parameters(), lr=1e-4, weight_decay=1e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    strokes = torch.randn(B, T + 1, 3, device=device)
    strokes[..., 2] = (torch.rand(B, T + 1, device=device) < 0.1).float()
    lengths = torch.randint(T // 3, T + 1, (B,), device=device)
    pad = torch.arange(T, device=device)[None] >= lengths[:, None]
    out = model(strokes[:, :-1], pad)
    mix, pen = mixture(out)
    target = strokes[:, 1:]
    valid = (~pad).float()
    nll = -(mix.log_prob(target[..., :2]) + pen.log_prob(target[..., 2]))
    entropy = mix.mixture_distribution.entropy()
    loss = ((nll - 0.01 * entropy) * valid).sum() / valid.sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} nll {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del strokes, lengths, pad, out, mix, pen, target, valid, nll, entropy, loss
model.eval()
with torch.no_grad():
    seq = torch.zeros(NS, 1, 3, device=device)
    for _ in range(GEN):
        out = model(seq)[:, -1]
        mix, pen = mixture(out)
        xy = mix.sample()
        p = pen.sample()
        seq = torch.cat([seq, torch.cat([xy, p[:, None]], -1)[:, None]], 1)
if device == "cuda":
    print(
        f"sample {tuple(seq.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke sample {tuple(seq.shape)}")
