"""Soft actor-critic (Haarnoja et al. 2018, the CleanRL layout) for a humanoid-sized continuous-control
task whose 1,024 environments are a batched toy physics simulation written in torch (17 damped, driven
pendulum joints integrated by semi-implicit Euler, observations a fixed random projection of
[q, qdot, sin q, cos q] to 376 features, reward forward progress minus control cost, resets by
torch.where).

Twin Q networks (3 x 1024 ReLU MLPs) and their targets, updated by in-place Polyak averaging with
torch._foreach_mul_ / torch._foreach_add_; a tanh-Gaussian policy sampled by the reparameterisation
trick with the tanh log-det correction; automatic entropy tuning of log_alpha towards -|A|. A replay
buffer of 1,000,000 transitions preallocated on the GPU (observations, next observations, actions,
rewards, dones), written by index_copy_ and sampled by torch.randint.

Phases: 24 environment steps with one SAC update each (batch 2048, the actor and alpha every 2nd, fp32
Adam x 3); a 100-step deterministic evaluation of 4,096 environments under inference_mode; DroQ
(Hiraoka et al.: critics with Dropout 0.01 and LayerNorm, 8 critic updates per environment step) under
bf16 autocast with fused Adams for 6 environment steps; then empty_cache() and a 50-step evaluation of
the DroQ actor under inference_mode. 4 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2222)
device = "cuda" if torch.cuda.is_available() else "cpu"
CAP, ENVS, BATCH, EVAL_ENVS, WIDTH = (4096, 16, 64, 32, 64) if SMALL else (1_000_000, 1024, 2048, 4096, 1024)
JOINTS, OBS, ACT = 17, 376, 17
DT, GAMMA, TAU = 0.02, 0.99, 0.005


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class PendulumChainEnv:
    """A batch of driven, damped pendulum chains (no contacts): state q, qdot of shape (n, 17)."""

    def __init__(self, n, gen):
        self.n = n
        self.proj = torch.randn(4 * JOINTS, OBS, device=device, generator=gen) / (4 * JOINTS) ** 0.5
        self.q = (torch.rand(n, JOINTS, device=device) - 0.5) * 0.2
        self.qd = torch.zeros(n, JOINTS, device=device)
        self.t = torch.zeros(n, dtype=torch.long, device=device)

    def obs(self):
        return torch.tanh(torch.cat([self.q, self.qd, self.q.sin(), self.q.cos()], 1) @ self.proj)

    def step(self, action):
        qdd = 40.0 * action - 0.5 * self.qd - 9.81 * self.q.sin()
        self.qd = self.qd + DT * qdd
        self.q = self.q + DT * self.qd
        self.t += 1
        reward = self.qd[:, :3].mean(1) - 0.1 * action.square().sum(1)
        done = (self.t >= 1000) | (self.q.abs().amax(1) > 3.0)
        reset_q = (torch.rand(self.n, JOINTS, device=device) - 0.5) * 0.2
        self.q = torch.where(done[:, None], reset_q, self.q)
        self.qd = torch.where(done[:, None], torch.zeros_like(self.qd), self.qd)
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        return reward, done


def mlp(i, o, droq=False):
    layers, d = [], i
    for _ in range(3):
        layers.append(nn.Linear(d, WIDTH))
        if droq:
            layers += [nn.Dropout(0.01), nn.LayerNorm(WIDTH)]
        layers.append(nn.ReLU())
        d = WIDTH
    layers.append(nn.Linear(d, o))
    return nn.Sequential(*layers)


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(OBS, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU())
        self.mean, self.log_std = nn.Linear(WIDTH, ACT), nn.Linear(WIDTH, ACT)

    def forward(self, obs):
        h = self.body(obs)
        log_std = torch.tanh(self.log_std(h))
        log_std = -5 + 0.5 * (2 - -5) * (log_std + 1)
        return self.mean(h), log_std

    def sample(self, obs):
        mean, log_std = self(obs)
        normal = torch.distributions.Normal(mean, log_std.exp())
        x = normal.rsample()
        y = torch.tanh(x)
        log_prob = (normal.log_prob(x) - torch.log(1 - y.pow(2) + 1e-6)).sum(1, keepdim=True)
        return y, log_prob, torch.tanh(mean)


class Agent:
    def __init__(self, droq=False, fused=False):
        self.actor = Actor().to(device)
        self.qs = nn.ModuleList([mlp(OBS + ACT, 1, droq) for _ in range(2)]).to(device)
        self.q_targets = copy.deepcopy(self.qs).requires_grad_(False)
        self.log_alpha = torch.zeros(1, device=device, requires_grad=True)
        self.q_opt = torch.optim.Adam(self.qs.parameters(), lr=3e-4, fused=fused)
        self.pi_opt = torch.optim.Adam(self.actor.parameters(), lr=3e-4, fused=fused)
        self.a_opt = torch.optim.Adam([self.log_alpha], lr=3e-4, fused=fused)
        self.target_entropy = -float(ACT)

    def critic_update(self, o, a, r, o2, d, amp):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            with torch.no_grad():
                a2, logp2, _ = self.actor.sample(o2)
                x2 = torch.cat([o2, a2], 1)
                q_next = torch.min(self.q_targets[0](x2), self.q_targets[1](x2)) - self.log_alpha.exp() * logp2
                y = r[:, None] + GAMMA * (1 - d[:, None].float()) * q_next.float()
            x = torch.cat([o, a], 1)
            q_loss = sum(F.mse_loss(q(x).float(), y) for q in self.qs)
        self.q_opt.zero_grad(set_to_none=True)
        q_loss.backward()
        self.q_opt.step()
        with torch.no_grad():
            tp, p = list(self.q_targets.parameters()), list(self.qs.parameters())
            torch._foreach_mul_(tp, 1 - TAU)
            torch._foreach_add_(tp, p, alpha=TAU)
        return q_loss.detach()

    def actor_update(self, o, amp):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            a, logp, _ = self.actor.sample(o)
            x = torch.cat([o, a], 1)
            q = torch.min(self.qs[0](x), self.qs[1](x)).float()
            pi_loss = (self.log_alpha.exp().detach() * logp.float() - q).mean()
        self.pi_opt.zero_grad(set_to_none=True)
        pi_loss.backward()
        self.pi_opt.step()
        alpha_loss = -(self.log_alpha * (logp.detach().float() + self.target_entropy)).mean()
        self.a_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.a_opt.step()
        return pi_loss.detach()


gen = torch.Generator(device=device).manual_seed(7)
env = PendulumChainEnv(ENVS, gen)
obs_buf = torch.zeros(CAP, OBS, device=device)
next_buf = torch.zeros(CAP, OBS, device=device)
act_buf = torch.zeros(CAP, ACT, device=device)
rew_buf = torch.zeros(CAP, device=device)
done_buf = torch.zeros(CAP, dtype=torch.bool, device=device)
size, pos = 0, 0


def collect(agent, stochastic=True):
    global size, pos
    o = env.obs()
    with torch.no_grad():
        a = agent.actor.sample(o)[0] if stochastic else torch.rand(ENVS, ACT, device=device) * 2 - 1
    r, d = env.step(a)
    idx = torch.arange(pos, pos + ENVS, device=device) % CAP
    obs_buf.index_copy_(0, idx, o)
    next_buf.index_copy_(0, idx, env.obs())
    act_buf.index_copy_(0, idx, a)
    rew_buf.index_copy_(0, idx, r)
    done_buf.index_copy_(0, idx, d)
    pos, size = (pos + ENVS) % CAP, min(size + ENVS, CAP)


def sample():
    idx = torch.randint(0, size, (BATCH,), device=device)
    return obs_buf[idx], act_buf[idx], rew_buf[idx], next_buf[idx], done_buf[idx]


agent = Agent()
for _ in range(4):  # random warm-up
    collect(agent, stochastic=False)
print("after warm-up", torch.cuda.memory_allocated() if device == "cuda" else 0)
q_losses = []
for step in range(24):
    collect(agent)
    batch = sample()
    q_losses.append(agent.critic_update(*batch, amp=False))
    if step % 2 == 0:
        agent.actor_update(batch[0], amp=False)
print("sac q losses", torch.stack(q_losses)[[0, -1]].tolist(), "alpha", agent.log_alpha.exp().item())
report("sac fp32")


def evaluate(actor, n, steps):
    ev = PendulumChainEnv(n, torch.Generator(device=device).manual_seed(11))
    ret = torch.zeros(n, device=device)
    with torch.inference_mode():
        for _ in range(steps):
            _, _, a = actor.sample(ev.obs())
            r, _ = ev.step(a)
            ret += r
    return ret.mean().item()


actor_was_training = agent.actor.training
agent.actor.eval()
print("eval return", evaluate(agent.actor, EVAL_ENVS, 100))
agent.actor.train(actor_was_training)
report("eval inference_mode")

droq = Agent(droq=True, fused=True)
q_losses = []
for step in range(6):
    collect(droq)
    for _ in range(8):
        q_losses.append(droq.critic_update(*sample(), amp=True))
    droq.actor_update(sample()[0], amp=True)
print("droq q losses", torch.stack(q_losses)[[0, -1]].tolist())
report("droq bf16 utd8 fused")

del agent
if device == "cuda":
    torch.cuda.empty_cache()
droq.actor.eval()
print("droq eval return", evaluate(droq.actor, EVAL_ENVS, 50))
report("droq eval after empty_cache")
