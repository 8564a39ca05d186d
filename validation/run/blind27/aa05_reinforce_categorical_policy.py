"""REINFORCE: an MLP policy over 4096 parallel environments' 128-dim observations, 64 steps per
episode with actions drawn from torch.distributions.Categorical (18 actions) on the device, rewards
turned into discounted returns by a flipped cumulative loop, normalised, the policy-gradient loss
with an entropy bonus; fp32, Adam, 2 episodes; 3 phases."""

import os

import torch
import torch.nn as nn
from torch.distributions import Categorical

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2705)
ENVS, T, OBS, A = (8, 4, 16, 18) if SMALL else (4096, 64, 128, 18)
device = "cuda" if torch.cuda.is_available() else "cpu"
policy = nn.Sequential(nn.Linear(OBS, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, A)).to(
    device
)
optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for episode in range(2):
    log_probs, entropies, rewards = [], [], []
    obs = torch.randn(ENVS, OBS, device=device)
    for _ in range(T):
        dist = Categorical(logits=policy(obs))
        action = dist.sample()
        log_probs.append(dist.log_prob(action))
        entropies.append(dist.entropy())
        rewards.append((action == 3).float() - 0.01)
        obs = torch.randn(ENVS, OBS, device=device)
    returns, running = [], torch.zeros(ENVS, device=device)
    for r in reversed(rewards):
        running = r + 0.99 * running
        returns.append(running)
    returns = torch.stack(returns[::-1])
    returns = (returns - returns.mean()) / (returns.std() + 1e-8)
    loss = -(torch.stack(log_probs) * returns).mean() - 0.01 * torch.stack(entropies).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del log_probs, entropies, rewards, returns, running, loss, obs, dist, action
    if device == "cuda":
        print(
            f"episode {episode} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
