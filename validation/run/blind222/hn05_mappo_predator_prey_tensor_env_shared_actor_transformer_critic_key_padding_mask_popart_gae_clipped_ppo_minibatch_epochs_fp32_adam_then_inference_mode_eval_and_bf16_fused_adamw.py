"""MAPPO (Yu et al. 2022) on a multi-agent predator-prey task simulated as tensors on the GPU: 2,048
arenas of 8 agents (point masses with velocity damping chasing 4 moving prey; agents that leave the
arena are out for the rest of the episode), discrete actions (5 accelerations), observations of 48
features (own state, relative positions of the others and of the prey).

A parameter-shared actor (MLP 256-256 tanh on the observation and a one-hot agent id, a Categorical
policy) and a centralised critic: a 2-layer nn.TransformerEncoder (d 128, 4 heads, batch_first) over the
8 agents of an arena with src_key_padding_mask for the agents that are out, a value per agent, with
PopArt value normalisation (running mean and variance, the output layer's weight and bias rescaled in
place under no_grad when the statistics move). Rollouts of 64 steps into preallocated storage under
no_grad, GAE(0.99, 0.95) by a reversed loop, 4 epochs of 4 minibatches of arenas (torch.randperm) with
the clipped surrogate, the clipped value loss on normalised returns and an entropy bonus.

Phases: 2 PPO iterations in fp32 with Adam (lr 5e-4, eps 1e-5, clip 10); a 100-step greedy evaluation of
8,192 arenas under inference_mode (the critic in eval mode too); then 1 PPO iteration under bf16 autocast
with fused AdamW after empty_cache(). 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2225)
device = "cuda" if torch.cuda.is_available() else "cpu"
ENVS, EVAL_ENVS, HORIZON = (32, 64, 8) if SMALL else (2048, 8192, 64)
AGENTS, PREY, OBS, ACTIONS, D = 8, 4, 48, 5, 128
EPOCHS, MINIBATCHES, GAMMA, LAM, CLIP = 4, 4, 0.99, 0.95, 0.2


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


ACCEL = torch.tensor([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]], device=device)


class PredatorPrey:
    def __init__(self, n):
        self.n = n
        self.pos = torch.rand(n, AGENTS, 2, device=device) * 2 - 1
        self.vel = torch.zeros(n, AGENTS, 2, device=device)
        self.prey = torch.rand(n, PREY, 2, device=device) * 2 - 1
        self.alive = torch.ones(n, AGENTS, dtype=torch.bool, device=device)
        self.t = 0

    def obs(self):
        rel = (self.pos[:, None, :, :] - self.pos[:, :, None, :]).flatten(2)  # (n, A, 16)
        rel_prey = (self.prey[:, None, :, :] - self.pos[:, :, None, :]).flatten(2)  # (n, A, 8)
        own = torch.cat([self.pos, self.vel], -1)  # (n, A, 4)
        pad = torch.zeros(self.n, AGENTS, OBS - 28, device=device)
        return torch.cat([own, rel, rel_prey, pad], -1)

    def step(self, actions):
        self.vel = 0.8 * self.vel + 0.1 * ACCEL[actions]
        self.pos = self.pos + 0.1 * self.vel
        self.prey = (self.prey + 0.02 * torch.randn_like(self.prey)).clamp(-1, 1)
        dist = torch.cdist(self.pos, self.prey).amin(-1)  # (n, A)
        reward = (dist < 0.1).float() - 0.01 * dist
        out = self.pos.abs().amax(-1) > 1.5
        out[:, 0] = False  # agent 0 is kept in so an arena never has every agent masked
        self.alive = self.alive & ~out
        self.t += 1
        done = torch.full((self.n,), self.t % 32 == 0, device=device)
        if self.t % 32 == 0:
            self.pos = torch.rand_like(self.pos) * 2 - 1
            self.vel.zero_()
            self.alive = torch.ones_like(self.alive)
        return reward * self.alive, done


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(OBS + AGENTS, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, ACTIONS))

    def forward(self, obs):
        ids = torch.eye(AGENTS, device=obs.device, dtype=obs.dtype).expand(*obs.shape[:-2], AGENTS, AGENTS)
        return self.net(torch.cat([obs, ids], -1))


class PopArtCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(OBS + AGENTS, D)
        layer = nn.TransformerEncoderLayer(D, 4, 4 * D, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(D, 1)
        self.register_buffer("mu", torch.zeros(()))
        self.register_buffer("nu", torch.ones(()))
        self.beta = 3e-4

    def sigma(self):
        return (self.nu - self.mu.square()).clamp_min(1e-4).sqrt()

    def forward(self, obs, alive):
        """obs (..., A, OBS), alive (..., A) -> normalised values (..., A)."""
        lead = obs.shape[:-2]
        ids = torch.eye(AGENTS, device=obs.device, dtype=obs.dtype).expand(*lead, AGENTS, AGENTS)
        x = self.embed(torch.cat([obs, ids], -1)).reshape(-1, AGENTS, D)
        x = self.encoder(x, src_key_padding_mask=~alive.reshape(-1, AGENTS))
        return self.head(x).squeeze(-1).reshape(*lead, AGENTS)

    @torch.no_grad()
    def update_stats(self, returns):
        old_mu, old_sigma = self.mu.clone(), self.sigma()
        self.mu.lerp_(returns.mean(), self.beta)
        self.nu.lerp_(returns.square().mean(), self.beta)
        new_sigma = self.sigma()
        self.head.weight.mul_(old_sigma / new_sigma)
        self.head.bias.mul_(old_sigma).add_(old_mu - self.mu).div_(new_sigma)


actor, critic = Actor().to(device), PopArtCritic().to(device)
params = list(actor.parameters()) + list(critic.parameters())

buf_obs = torch.zeros(HORIZON, ENVS, AGENTS, OBS, device=device)
buf_alive = torch.zeros(HORIZON, ENVS, AGENTS, dtype=torch.bool, device=device)
buf_act = torch.zeros(HORIZON, ENVS, AGENTS, dtype=torch.long, device=device)
buf_logp = torch.zeros(HORIZON, ENVS, AGENTS, device=device)
buf_val = torch.zeros(HORIZON, ENVS, AGENTS, device=device)
buf_rew = torch.zeros(HORIZON, ENVS, AGENTS, device=device)
buf_done = torch.zeros(HORIZON, ENVS, device=device)
env = PredatorPrey(ENVS)


def iteration(opt, amp):
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        for t in range(HORIZON):
            o, alive = env.obs(), env.alive.clone()
            dist = torch.distributions.Categorical(logits=actor(o).float())
            a = dist.sample()
            buf_obs[t], buf_alive[t], buf_act[t] = o, alive, a
            buf_logp[t] = dist.log_prob(a)
            buf_val[t] = critic(o, alive).float() * critic.sigma() + critic.mu
            r, d = env.step(a)
            buf_rew[t], buf_done[t] = r, d.float()
        next_val = critic(env.obs(), env.alive).float() * critic.sigma() + critic.mu
    adv = torch.zeros_like(buf_rew)
    last = torch.zeros(ENVS, AGENTS, device=device)
    for t in reversed(range(HORIZON)):
        nv = next_val if t == HORIZON - 1 else buf_val[t + 1]
        nonterm = 1.0 - buf_done[t][:, None]
        delta = buf_rew[t] + GAMMA * nv * nonterm - buf_val[t]
        last = delta + GAMMA * LAM * nonterm * last
        adv[t] = last
    returns = adv + buf_val
    critic.update_stats(returns)
    ret_n = (returns - critic.mu) / critic.sigma()
    old_v_n = (buf_val - critic.mu) / critic.sigma()
    stats = []
    for _ in range(EPOCHS):
        perm = torch.randperm(ENVS, device=device)
        for mb in perm.chunk(MINIBATCHES):
            o, al, a = buf_obs[:, mb], buf_alive[:, mb], buf_act[:, mb]
            mb_adv = adv[:, mb]
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                logits = actor(o).float()
                v = critic(o, al).float()
            dist = torch.distributions.Categorical(logits=logits)
            ratio = (dist.log_prob(a) - buf_logp[:, mb]).exp()
            pg = -torch.min(ratio * mb_adv, ratio.clamp(1 - CLIP, 1 + CLIP) * mb_adv)
            v_clip = old_v_n[:, mb] + (v - old_v_n[:, mb]).clamp(-CLIP, CLIP)
            v_loss = torch.max((v - ret_n[:, mb]).square(), (v_clip - ret_n[:, mb]).square())
            w = al.float()
            loss = ((pg + 0.5 * v_loss - 0.01 * dist.entropy()) * w).sum() / w.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 10.0)
            opt.step()
            stats.append(loss.detach())
    return torch.stack(stats)


opt = torch.optim.Adam(params, lr=5e-4, eps=1e-5)
for it in range(2):
    s = iteration(opt, amp=False)
print("fp32 losses", s[[0, -1]].tolist())
report("mappo fp32")

actor.eval()
critic.eval()
ev = PredatorPrey(EVAL_ENVS)
total, values = torch.zeros((), device=device), torch.zeros((), device=device)
with torch.inference_mode():
    for _ in range(100):
        o = ev.obs()
        values += critic(o, ev.alive).mean()
        r, _ = ev.step(actor(o).argmax(-1))
        total += r.sum() / EVAL_ENVS
print("eval return", total.item(), "mean value", (values / 100).item())
actor.train()
critic.train()
report("eval inference_mode")

del opt, ev
if device == "cuda":
    torch.cuda.empty_cache()
opt = torch.optim.AdamW(params, lr=5e-4, eps=1e-5, weight_decay=0.0, fused=device == "cuda")
s = iteration(opt, amp=device == "cuda")
print("bf16 losses", s[[0, -1]].tolist())
report("mappo bf16 fused adamw")
