"""A mixture density network: an MLP predicts 16 Gaussian components per target (logits, means, log-scales
over 8 dimensions), the negative log-likelihood through torch.distributions (MixtureSameFamily of
Independent Normals, log_prob by logsumexp); fp32, Adam with gradient clipping, batch 16384, 3 steps."""

import os

import torch
import torch.nn as nn
from torch.distributions import Categorical, Independent, MixtureSameFamily, Normal

SMALL = bool(os.environ.get("SMOKE"))
BATCH, IN, OUT, COMPONENTS, WIDTH = (16, 4, 2, 3, 32) if SMALL else (16384, 64, 8, 16, 1024)
torch.manual_seed(1404)
device = "cuda" if torch.cuda.is_available() else "cpu"
body = nn.Sequential(nn.Linear(IN, WIDTH), nn.SiLU(), nn.Linear(WIDTH, WIDTH), nn.SiLU())
heads = nn.Linear(WIDTH, COMPONENTS * (1 + 2 * OUT))
model = nn.Sequential(body, heads).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(BATCH, IN, device=device)
    y = torch.randn(BATCH, OUT, device=device)
    out = model(x)
    logits = out[:, :COMPONENTS]
    mu, log_sigma = out[:, COMPONENTS:].view(BATCH, COMPONENTS, 2, OUT).unbind(2)
    mix = MixtureSameFamily(Categorical(logits=logits), Independent(Normal(mu, log_sigma.clamp(-5, 5).exp()), 1))
    loss = -mix.log_prob(y).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
