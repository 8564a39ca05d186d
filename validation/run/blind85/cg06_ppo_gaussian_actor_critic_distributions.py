"""PPO for a continuous-control policy: a separate Gaussian actor (tanh MLP, state-independent
log-std) and critic, a synthetic rollout of 64 environments x 256 steps collected under no_grad with
torch.distributions.Independent(Normal), generalised advantage estimation by a reverse loop, then 4
epochs of 8 shuffled minibatches with the clipped surrogate, value clipping, entropy bonus, gradient
clipping and two Adam optimizers; fp32; 3 phases."""

import os

import torch
import torch.nn as nn
from torch.distributions import Independent, Normal

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8506)
N_ENV, T, OBS, ACT, HID = (4, 16, 8, 2, 32) if SMALL else (64, 256, 376, 17, 1024)
EPOCHS, MB = 4, 8
device = "cuda" if torch.cuda.is_available() else "cpu"


def mlp(out):
    return nn.Sequential(nn.Linear(OBS, HID), nn.Tanh(), nn.Linear(HID, HID), nn.Tanh(), nn.Linear(HID, out))


actor = mlp(ACT).to(device)
log_std = nn.Parameter(torch.full((ACT,), -0.5, device=device))
critic = mlp(1).to(device)
opt_pi = torch.optim.Adam([*actor.parameters(), log_std], lr=3e-4, eps=1e-5)
opt_v = torch.optim.Adam(critic.parameters(), lr=1e-3, eps=1e-5)
W = torch.randn(OBS, OBS, device=device) / OBS**0.5


def dist(obs):
    return Independent(Normal(actor(obs), log_std.exp()), 1)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for iteration in range(2):
    obs_buf, act_buf, logp_buf, val_buf, rew_buf = [], [], [], [], []
    obs = torch.randn(N_ENV, OBS, device=device)
    with torch.no_grad():
        for _t in range(T):
            d = dist(obs)
            a = d.sample()
            obs_buf.append(obs)
            act_buf.append(a)
            logp_buf.append(d.log_prob(a))
            val_buf.append(critic(obs).squeeze(-1))
            rew_buf.append(-(a**2).sum(-1) + obs[:, 0])
            obs = torch.tanh(obs @ W) + 0.1 * torch.randn_like(obs)
        last_v = critic(obs).squeeze(-1)
        rewards, values = torch.stack(rew_buf), torch.stack(val_buf)
        adv = torch.zeros_like(rewards)
        gae = torch.zeros(N_ENV, device=device)
        for t in reversed(range(T)):
            nxt = last_v if t == T - 1 else values[t + 1]
            delta = rewards[t] + 0.99 * nxt - values[t]
            gae = delta + 0.99 * 0.95 * gae
            adv[t] = gae
        returns = adv + values
    b_obs, b_act = torch.stack(obs_buf).flatten(0, 1), torch.stack(act_buf).flatten(0, 1)
    b_logp, b_adv = torch.stack(logp_buf).flatten(), adv.flatten()
    b_ret, b_val = returns.flatten(), values.flatten()
    del obs_buf, act_buf, logp_buf, val_buf, rew_buf
    n = b_obs.shape[0]
    for _epoch in range(EPOCHS):
        perm = torch.randperm(n, device=device)
        for idx in perm.chunk(MB):
            d = dist(b_obs[idx])
            ratio = (d.log_prob(b_act[idx]) - b_logp[idx]).exp()
            a_n = (b_adv[idx] - b_adv[idx].mean()) / (b_adv[idx].std() + 1e-8)
            pi_loss = -torch.min(ratio * a_n, ratio.clamp(0.8, 1.2) * a_n).mean() - 0.01 * d.entropy().mean()
            v = critic(b_obs[idx]).squeeze(-1)
            v_clip = b_val[idx] + (v - b_val[idx]).clamp(-0.2, 0.2)
            v_loss = 0.5 * torch.max((v - b_ret[idx]) ** 2, (v_clip - b_ret[idx]) ** 2).mean()
            opt_pi.zero_grad(set_to_none=True)
            opt_v.zero_grad(set_to_none=True)
            (pi_loss + v_loss).backward()
            nn.utils.clip_grad_norm_([*actor.parameters(), log_std], 0.5)
            nn.utils.clip_grad_norm_(critic.parameters(), 0.5)
            opt_pi.step()
            opt_v.step()
    if device == "cuda":
        print(
            f"iter {iteration} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
