"""Advantage actor-critic and phasic policy gradient (Cobbe et al. 2021) written by hand for a batch of
gridworlds stepped on the GPU: each of 512 (A2C) or 256 (PPG) environments is an 11 x 11 grid with an
agent, a goal and a fixed random wall layout; observations are 3-channel one-hot planes built by
index_put_ into a zeros tensor and flattened; moves come from a (5, 2) delta table indexed by the
action, are undone where they hit a wall or the border, and the episode resets by torch.where at the
goal or after 64 steps.

Phases: A2C (shared MLP torso, policy and value heads, 5-step rollouts, n-step returns by a reversed
loop, RMSprop alpha 0.99 eps 1e-5, clip_grad_norm 0.5, 60 updates, fp32); PPG policy phase (separate
policy and value MLPs, the policy with an auxiliary value head; 4 iterations of 64-step rollouts into
preallocated storage, GAE by a fixed-length reversed loop, 2 PPO epochs of 4 minibatches, Adam, fp32),
every observation kept in a preallocated aux buffer; PPG auxiliary phase (old policy logits computed
in chunks under no_grad, 3 epochs of KL distillation + aux value + value loss under bf16 autocast);
a 64-step greedy evaluation of 4,096 grids under no_grad. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3282)
device = "cuda" if torch.cuda.is_available() else "cpu"
G, NA = 11, 5
A2C_ENVS, PPG_ENVS, T, N_PI, EVAL_ENVS, WIDTH = (
    (32, 16, 16, 2, 64, 64) if SMALL else (512, 256, 64, 4, 4096, 512)
)
OBS = 3 * G * G
GAMMA, LAM, CLIP = 0.99, 0.95, 0.2


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


WALLS = torch.rand(G, G, device=device) < 0.15
DELTAS = torch.tensor([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]], device=device)


class GridWorlds:
    def __init__(self, n):
        self.n = n
        self.ar = torch.arange(n, device=device)
        self.pos = torch.randint(0, G, (n, 2), device=device)
        self.goal = torch.randint(0, G, (n, 2), device=device)
        self.t = torch.zeros(n, dtype=torch.long, device=device)

    def obs(self):
        o = torch.zeros(self.n, 3, G, G, device=device)
        o[:, 0] = WALLS.float()
        o.index_put_(
            (self.ar, torch.ones_like(self.ar), self.pos[:, 0], self.pos[:, 1]),
            torch.ones(self.n, device=device),
        )
        o.index_put_(
            (self.ar, torch.full_like(self.ar, 2), self.goal[:, 0], self.goal[:, 1]),
            torch.ones(self.n, device=device),
        )
        return o.flatten(1)

    def step(self, action):
        new = (self.pos + DELTAS[action]).clamp(0, G - 1)
        blocked = WALLS[new[:, 0], new[:, 1]]
        self.pos = torch.where(blocked[:, None], self.pos, new)
        self.t += 1
        at_goal = (self.pos == self.goal).all(1)
        reward = at_goal.float() - 0.01
        done = at_goal | (self.t >= 64)
        self.pos = torch.where(done[:, None], torch.randint(0, G, (self.n, 2), device=device), self.pos)
        self.goal = torch.where(done[:, None], torch.randint(0, G, (self.n, 2), device=device), self.goal)
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        return reward, done.float()


def mlp(i, o):
    return nn.Sequential(
        nn.Linear(i, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, o)
    )


class A2CNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.torso = nn.Sequential(nn.Linear(OBS, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU())
        self.pi, self.v = nn.Linear(WIDTH, NA), nn.Linear(WIDTH, 1)

    def forward(self, o):
        h = self.torso(o)
        return self.pi(h), self.v(h).squeeze(-1)


# --- A2C ---
env = GridWorlds(A2C_ENVS)
net = A2CNet().to(device)
opt = torch.optim.RMSprop(net.parameters(), lr=7e-4, alpha=0.99, eps=1e-5)
obs = env.obs()
NSTEP = 5
for update in range(60):
    logps, values, ents, rews, dones = [], [], [], [], []
    for _ in range(NSTEP):
        logits, v = net(obs)
        dist = torch.distributions.Categorical(logits=logits)
        a = dist.sample()
        r, d = env.step(a)
        logps.append(dist.log_prob(a))
        values.append(v)
        ents.append(dist.entropy())
        rews.append(r)
        dones.append(d)
        obs = env.obs()
    with torch.no_grad():
        ret = net(obs)[1]
    returns = []
    for k in reversed(range(NSTEP)):
        ret = rews[k] + GAMMA * ret * (1 - dones[k])
        returns.append(ret)
    returns = torch.stack(returns[::-1])
    values, logps, ents = torch.stack(values), torch.stack(logps), torch.stack(ents)
    adv = returns - values
    loss = -(adv.detach() * logps).mean() + 0.5 * adv.pow(2).mean() - 0.01 * ents.mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(net.parameters(), 0.5)
    opt.step()
print(f"a2c loss {loss.item():.4f}")
del net, opt, logps, values, ents, adv
report("a2c")

# --- PPG policy phase ---
env = GridWorlds(PPG_ENVS)
policy = mlp(OBS, NA + 1).to(device)  # logits and the auxiliary value head
value = mlp(OBS, 1).to(device)
pi_opt = torch.optim.Adam(policy.parameters(), lr=5e-4, eps=1e-5)
v_opt = torch.optim.Adam(value.parameters(), lr=5e-4, eps=1e-5)
obs_s = torch.zeros(T, PPG_ENVS, OBS, device=device)
act_s = torch.zeros(T, PPG_ENVS, dtype=torch.long, device=device)
logp_s = torch.zeros(T, PPG_ENVS, device=device)
rew_s = torch.zeros(T, PPG_ENVS, device=device)
done_s = torch.zeros(T, PPG_ENVS, device=device)
val_s = torch.zeros(T, PPG_ENVS, device=device)
aux_obs = torch.zeros(N_PI * T * PPG_ENVS, OBS, device=device)
aux_ret = torch.zeros(N_PI * T * PPG_ENVS, device=device)
obs = env.obs()
for it in range(N_PI):
    with torch.no_grad():
        for t in range(T):
            logits = policy(obs)[:, :NA]
            dist = torch.distributions.Categorical(logits=logits)
            a = dist.sample()
            obs_s[t] = obs
            act_s[t] = a
            logp_s[t] = dist.log_prob(a)
            val_s[t] = value(obs).squeeze(-1)
            rew_s[t], done_s[t] = env.step(a)
            obs = env.obs()
        last = value(obs).squeeze(-1)
        adv_s = torch.zeros_like(rew_s)
        gae = torch.zeros(PPG_ENVS, device=device)
        for t in reversed(range(T)):
            nv = last if t == T - 1 else val_s[t + 1]
            delta = rew_s[t] + GAMMA * nv * (1 - done_s[t]) - val_s[t]
            gae = delta + GAMMA * LAM * (1 - done_s[t]) * gae
            adv_s[t] = gae
        ret_s = adv_s + val_s
    n = T * PPG_ENVS
    aux_obs[it * n : (it + 1) * n] = obs_s.view(n, OBS)
    aux_ret[it * n : (it + 1) * n] = ret_s.view(n)
    b_obs, b_act, b_logp = obs_s.view(n, OBS), act_s.view(n), logp_s.view(n)
    b_adv, b_ret = adv_s.view(n), ret_s.view(n)
    for epoch in range(2):
        perm = torch.randperm(n, device=device)
        for mb in perm.view(4, n // 4):
            logits = policy(b_obs[mb])[:, :NA]
            dist = torch.distributions.Categorical(logits=logits)
            ratio = (dist.log_prob(b_act[mb]) - b_logp[mb]).exp()
            adv = b_adv[mb]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pi_loss = (
                -torch.min(ratio * adv, ratio.clamp(1 - CLIP, 1 + CLIP) * adv).mean()
                - 0.01 * dist.entropy().mean()
            )
            pi_opt.zero_grad(set_to_none=True)
            pi_loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            pi_opt.step()
            v_loss = 0.5 * (value(b_obs[mb]).squeeze(-1) - b_ret[mb]).pow(2).mean()
            v_opt.zero_grad(set_to_none=True)
            v_loss.backward()
            v_opt.step()
print(f"ppg policy loss {pi_loss.item():.4f} value loss {v_loss.item():.4f}")
report("ppg_policy_phase")

# --- PPG auxiliary phase ---
NAUX = aux_obs.shape[0]
CH = NAUX // 8
with torch.no_grad():
    old_logp = torch.cat([F.log_softmax(policy(aux_obs[s : s + CH])[:, :NA], -1) for s in range(0, NAUX, CH)])
for epoch in range(3):
    perm = torch.randperm(NAUX, device=device)
    for mb in perm.view(16, NAUX // 16):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = policy(aux_obs[mb])
            new_logp = F.log_softmax(out[:, :NA].float(), -1)
            kl = F.kl_div(new_logp, old_logp[mb], log_target=True, reduction="batchmean")
            aux_loss = 0.5 * (out[:, NA].float() - aux_ret[mb]).pow(2).mean() + kl
            v_loss = 0.5 * (value(aux_obs[mb]).squeeze(-1).float() - aux_ret[mb]).pow(2).mean()
        pi_opt.zero_grad(set_to_none=True)
        aux_loss.backward()
        pi_opt.step()
        v_opt.zero_grad(set_to_none=True)
        v_loss.backward()
        v_opt.step()
print(f"ppg aux loss {aux_loss.item():.4f} kl {kl.item():.5f}")
del old_logp
report("ppg_aux_phase")

env = GridWorlds(EVAL_ENVS)
total = torch.zeros(EVAL_ENVS, device=device)
with torch.no_grad():
    for _ in range(64):
        r, _ = env.step(policy(env.obs())[:, :NA].argmax(-1))
        total += r
print(f"greedy eval return {total.mean().item():.4f}")
report("eval")
