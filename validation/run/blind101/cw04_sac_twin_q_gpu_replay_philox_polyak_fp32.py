"""Soft actor-critic with a replay buffer held on the GPU: a tanh-squashed Gaussian actor
(torch.distributions Normal, rsample, the log-det correction), twin Q critics and their target
copies updated by Polyak averaging (torch._foreach_mul_ / _foreach_add_), a learned temperature
(log alpha, its own Adam); 512 toy environments stepped on the GPU fill a 400,000-transition ring
buffer (obs 48, action 8) in 96-step rollouts, and minibatches of 4,096 are drawn by torch.randint
from a dedicated CUDA torch.Generator (seeded, Philox) so the draws do not touch the default stream
of random numbers; three Adam optimizers, fp32, 3 rounds of 8 gradient steps each; 4 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
from torch.distributions import Normal

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10104)
OBS, ACT = 48, 8
ENVS, ROLL, CAP, BATCH, HID, ROUNDS, UPD = (
    (8, 4, 256, 32, 32, 2, 2) if SMALL else (512, 96, 400_000, 4096, 512, 3, 8)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
gen = torch.Generator(device=device)
gen.manual_seed(2024)


def mlp(d_in, d_out):
    return nn.Sequential(
        nn.Linear(d_in, HID), nn.ReLU(), nn.Linear(HID, HID), nn.ReLU(), nn.Linear(HID, d_out)
    )


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(OBS, 2 * ACT)

    def forward(self, obs):
        mu, log_std = self.net(obs).chunk(2, dim=-1)
        dist = Normal(mu, log_std.clamp(-5, 2).exp())
        u = dist.rsample()
        a = torch.tanh(u)
        logp = dist.log_prob(u).sum(-1) - (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return a, logp


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.q1 = mlp(OBS + ACT, 1)
        self.q2 = mlp(OBS + ACT, 1)

    def forward(self, obs, act):
        x = torch.cat([obs, act], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)


actor, critic = Actor().to(device), Critic().to(device)
target = copy.deepcopy(critic).requires_grad_(False)
log_alpha = torch.zeros((), device=device, requires_grad=True)
opt_a = torch.optim.Adam(actor.parameters(), lr=3e-4)
opt_c = torch.optim.Adam(critic.parameters(), lr=3e-4)
opt_t = torch.optim.Adam([log_alpha], lr=3e-4)
buf_obs = torch.zeros(CAP, OBS, device=device)
buf_act = torch.zeros(CAP, ACT, device=device)
buf_rew = torch.zeros(CAP, device=device)
buf_next = torch.zeros(CAP, OBS, device=device)
buf_done = torch.zeros(CAP, device=device)
W = torch.randn(OBS, OBS, device=device) / OBS**0.5
V = torch.randn(ACT, OBS, device=device) / ACT**0.5
obs = torch.randn(ENVS, OBS, device=device)
ptr, size = 0, 0
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for rnd in range(ROUNDS):
    with torch.no_grad():
        for _ in range(ROLL):
            act, _ = actor(obs)
            nxt = torch.tanh(obs @ W + act @ V) + 0.05 * torch.randn(ENVS, OBS, device=device)
            rew = -(nxt.pow(2).mean(-1)) - 0.01 * act.pow(2).sum(-1)
            done = (torch.rand(ENVS, device=device) < 0.01).float()
            idx = (ptr + torch.arange(ENVS, device=device)) % CAP
            buf_obs[idx], buf_act[idx], buf_rew[idx], buf_next[idx], buf_done[idx] = obs, act, rew, nxt, done
            ptr, size = (ptr + ENVS) % CAP, min(size + ENVS, CAP)
            obs = torch.where(done[:, None] > 0, torch.randn(ENVS, OBS, device=device), nxt)
    for _ in range(UPD):
        i = torch.randint(0, size, (BATCH,), device=device, generator=gen)
        o, a, r, o2, d = buf_obs[i], buf_act[i], buf_rew[i], buf_next[i], buf_done[i]
        alpha = log_alpha.exp().detach()
        with torch.no_grad():
            a2, logp2 = actor(o2)
            tq1, tq2 = target(o2, a2)
            y = r + 0.99 * (1 - d) * (torch.min(tq1, tq2) - alpha * logp2)
        q1, q2 = critic(o, a)
        loss_c = (q1 - y).pow(2).mean() + (q2 - y).pow(2).mean()
        opt_c.zero_grad(set_to_none=True)
        loss_c.backward()
        opt_c.step()
        pa, logp = actor(o)
        qa1, qa2 = critic(o, pa)
        loss_a = (alpha * logp - torch.min(qa1, qa2)).mean()
        opt_a.zero_grad(set_to_none=True)
        loss_a.backward()
        opt_a.step()
        loss_t = -(log_alpha * (logp.detach() - ACT)).mean()
        opt_t.zero_grad(set_to_none=True)
        loss_t.backward()
        opt_t.step()
        with torch.no_grad():
            tp, cp = list(target.parameters()), list(critic.parameters())
            torch._foreach_mul_(tp, 0.995)
            torch._foreach_add_(tp, cp, alpha=0.005)
    if device == "cuda":
        print(
            f"round {rnd} size {size} critic {loss_c.item():.3f} actor {loss_a.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del i, o, a, r, o2, d, a2, logp2, tq1, tq2, y, q1, q2, loss_c, pa, logp, qa1, qa2, loss_a, loss_t
