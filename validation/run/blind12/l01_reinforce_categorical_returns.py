"""REINFORCE on synthetic episodes: a policy MLP over 4096 parallel environments x 64 time steps,
torch.distributions.Categorical sampling and log_prob, discounted returns by a reversed cumulative
product/sum (flip, cumprod, cumsum), normalised advantages, an entropy bonus, Adam, fp32, 3 updates."""

import os

import torch
import torch.nn as nn
from torch.distributions import Categorical

SMALL = bool(os.environ.get("SMOKE"))
ENVS, STEPS, OBS, ACTIONS = (8, 4, 6, 3) if SMALL else (4096, 64, 128, 18)
torch.manual_seed(1201)
device = "cuda" if torch.cuda.is_available() else "cpu"
policy = nn.Sequential(nn.Linear(OBS, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, ACTIONS)).to(device)
optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4)
gamma = 0.99
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for update in range(3):
    obs = torch.randn(STEPS, ENVS, OBS, device=device)
    dist = Categorical(logits=policy(obs))
    actions = dist.sample()
    logp = dist.log_prob(actions)
    rewards = torch.randn(STEPS, ENVS, device=device)
    discounts = torch.full((STEPS, 1), gamma, device=device).cumprod(0) / gamma
    returns = (rewards * discounts).flip(0).cumsum(0).flip(0) / discounts
    adv = (returns - returns.mean()) / (returns.std() + 1e-8)
    loss = -(logp * adv).mean() - 0.01 * dist.entropy().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"update {update} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
