"""Advantage actor-critic (A2C) with generalised advantage estimation over 2,048 toy environments
simulated on the GPU (a 2-D point mass steered toward a goal, its noise and goal resets drawn with
torch.rand/randn on the GPU): an MLP encoder into an nn.GRU of 256 with actor and critic heads;
each of 4 updates collects a 64-step rollout under no_grad (Categorical sampling, step by step
through the GRU), then re-runs the whole rollout through the GRU with gradients; centered RMSprop
(foreach) with gradient clipping and an entropy bonus, fp32; 5 phases."""

import os

import torch
import torch.nn as nn
from torch.distributions import Categorical

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9601)
N, T, HID, UPDATES = (16, 8, 32, 2) if SMALL else (2048, 64, 256, 4)
OBS, ACTIONS, GAMMA, LAM = 8, 9, 0.99, 0.95
device = "cuda" if torch.cuda.is_available() else "cpu"
DIRS = torch.tensor([[dx, dy] for dx in (-1.0, 0.0, 1.0) for dy in (-1.0, 0.0, 1.0)], device=device)


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(OBS, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh())
        self.gru = nn.GRU(128, HID)
        self.actor = nn.Linear(HID, ACTIONS)
        self.critic = nn.Linear(HID, 1)

    def forward(self, obs, h):
        out, h = self.gru(self.enc(obs), h)
        return self.actor(out), self.critic(out).squeeze(-1), h


class PointMass:
    def __init__(self):
        self.pos = torch.rand(N, 2, device=device) * 2 - 1
        self.vel = torch.zeros(N, 2, device=device)
        self.goal = torch.rand(N, 2, device=device) * 2 - 1

    def obs(self):
        noise = 0.01 * torch.randn(N, 2, device=device)
        return torch.cat([self.pos, self.vel, self.goal - self.pos, noise], dim=-1)

    def step(self, action):
        self.vel = 0.9 * self.vel + 0.05 * DIRS[action]
        self.pos = (self.pos + self.vel).clamp(-1.5, 1.5)
        dist = (self.goal - self.pos).norm(dim=-1)
        done = dist < 0.1
        reward = -dist + 5.0 * done.float()
        fresh = torch.rand(N, 2, device=device) * 2 - 1
        self.goal = torch.where(done[:, None], fresh, self.goal)
        return reward, done


model = ActorCritic().to(device)
optimizer = torch.optim.RMSprop(
    model.parameters(), lr=7e-4, alpha=0.99, eps=1e-5, centered=True, foreach=True
)
env = PointMass()
h = torch.zeros(1, N, HID, device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for update in range(UPDATES):
    h0 = h.detach()
    obs_buf, act_buf, rew_buf, done_buf, val_buf = [], [], [], [], []
    with torch.no_grad():
        obs = env.obs()
        for _ in range(T):
            logits, value, h = model(obs[None], h)
            action = Categorical(logits=logits[0]).sample()
            reward, done = env.step(action)
            obs_buf.append(obs)
            act_buf.append(action)
            rew_buf.append(reward)
            done_buf.append(done.float())
            val_buf.append(value[0])
            obs = env.obs()
        _, last_value, _ = model(obs[None], h)
    rewards, dones, values = torch.stack(rew_buf), torch.stack(done_buf), torch.stack(val_buf)
    adv = torch.zeros_like(rewards)
    gae = torch.zeros(N, device=device)
    next_value = last_value[0]
    for t in reversed(range(T)):
        delta = rewards[t] + GAMMA * next_value * (1 - dones[t]) - values[t]
        gae = delta + GAMMA * LAM * (1 - dones[t]) * gae
        adv[t] = gae
        next_value = values[t]
    returns = adv + values
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    logits, value, _ = model(torch.stack(obs_buf), h0)
    dist = Categorical(logits=logits)
    policy_loss = -(dist.log_prob(torch.stack(act_buf)) * adv).mean()
    value_loss = 0.5 * (returns - value).pow(2).mean()
    loss = policy_loss + 0.5 * value_loss - 0.01 * dist.entropy().mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    optimizer.step()
    if device == "cuda":
        print(
            f"update {update} loss {loss.item():.3f} return {rewards.sum(0).mean().item():.2f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del obs_buf, act_buf, rew_buf, done_buf, val_buf, rewards, dones, values, adv, returns
    del logits, value, dist, loss, policy_loss, value_loss, last_value, next_value, gae, delta
