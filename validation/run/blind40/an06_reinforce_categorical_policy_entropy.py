"""Policy-gradient training (REINFORCE with a baseline) of an MLP policy over 1,000 actions:
torch.distributions.Categorical from logits, sample, log_prob and entropy bonus, a value head
trained with MSE, Adam, fp32, batch 4096 of 512-dim observations, 3 updates; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4006)
B, OBS, A, W = (16, 8, 10, 32) if SMALL else (4096, 512, 1000, 1024)


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(OBS, W), nn.Tanh(), nn.Linear(W, W), nn.Tanh())
        self.pi = nn.Linear(W, A)
        self.v = nn.Linear(W, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


device = "cuda" if torch.cuda.is_available() else "cpu"
model = ActorCritic().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    obs = torch.randn(B, OBS, device=device)
    logits, value = model(obs)
    dist = Categorical(logits=logits)
    action = dist.sample()
    reward = torch.randn(B, device=device)
    advantage = reward - value.detach()
    loss = -(dist.log_prob(action) * advantage).mean() - 0.01 * dist.entropy().mean()
    loss = loss + 0.5 * F.mse_loss(value, reward)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    del obs, logits, value, dist, action, reward, advantage, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
