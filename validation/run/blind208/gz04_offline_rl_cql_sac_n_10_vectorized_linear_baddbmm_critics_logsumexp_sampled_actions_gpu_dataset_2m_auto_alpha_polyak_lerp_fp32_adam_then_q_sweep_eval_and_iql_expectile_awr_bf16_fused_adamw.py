"""Offline RL on a GPU-resident dataset: CQL over a SAC-N critic ensemble, then IQL (CORL-style code).

Data: 2,000,000 transitions of a humanoid-sized task (376-d observations, 17-d actions, rewards,
terminals, next observations), random, held on the GPU as in CORL's ReplayBuffer.

CQL (Kumar et al. 2020) on SAC-N: a tanh-Gaussian actor (3 x 512, ReLU) and an ensemble of 10 critics as
one module of VectorizedLinear layers (weights (10, in, out), forward by torch.baddbmm, as CORL's
EDAC/SAC-N), target critics by deepcopy updated by lerp_ (tau 0.005), automatic entropy temperature,
batch 2048; the conservative term is the logsumexp over 10 uniform random actions, 10 policy actions at
s and 10 at s' (importance-corrected by their log-probabilities) minus the dataset Q, weight 5; Adam
for actor, critics and alpha.

Phases: the first CQL step (fp32); 4 more steps; an evaluation sweep of the ensemble over the whole
dataset in chunks of 65,536 under no_grad (mean Q, ensemble std, policy actions); then IQL
(Kostrikov et al. 2021): expectile value network (tau 0.7), a 2-critic VectorizedLinear ensemble, an
advantage-weighted Gaussian actor (exp(3 adv) clamped at 100) with CosineAnnealingLR, bf16 autocast and
fused AdamW, batch 4096. 4 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2084)
if SMALL:
    N, OBS, ACT, HIDDEN, ENSEMBLE, BATCH, NUM_SAMPLED, CHUNK, IQL_BATCH = (
        4096,
        17,
        6,
        64,
        10,
        64,
        10,
        1024,
        128,
    )
else:
    N, OBS, ACT, HIDDEN, ENSEMBLE, BATCH, NUM_SAMPLED, CHUNK, IQL_BATCH = (
        2_000_000,
        376,
        17,
        512,
        10,
        2048,
        10,
        65536,
        4096,
    )
GAMMA, TAU, CQL_WEIGHT = 0.99, 0.005, 5.0
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class VectorizedLinear(nn.Module):
    def __init__(self, in_features, out_features, ensemble_size):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ensemble_size, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(ensemble_size, 1, out_features))
        for layer in range(ensemble_size):
            nn.init.kaiming_uniform_(self.weight[layer], a=math.sqrt(5))
        bound = 1 / math.sqrt(in_features)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        # x: (ensemble, batch, in_features)
        return x @ self.weight + self.bias if x.dim() != 3 else torch.baddbmm(self.bias, x, self.weight)


class VectorizedCritic(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.critic = nn.Sequential(
            VectorizedLinear(OBS + ACT, HIDDEN, n),
            nn.ReLU(),
            VectorizedLinear(HIDDEN, HIDDEN, n),
            nn.ReLU(),
            VectorizedLinear(HIDDEN, HIDDEN, n),
            nn.ReLU(),
            VectorizedLinear(HIDDEN, 1, n),
        )
        self.n = n

    def forward(self, state, action):
        sa = torch.cat([state, action], dim=-1)
        if sa.dim() != 3:
            sa = sa.unsqueeze(0).repeat_interleave(self.n, dim=0)
        return self.critic(sa).squeeze(-1)  # (n, batch)


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(OBS, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
        )
        self.mu = nn.Linear(HIDDEN, ACT)
        self.log_sigma = nn.Linear(HIDDEN, ACT)

    def forward(self, state, deterministic=False):
        h = self.trunk(state)
        mu, log_sigma = self.mu(h), torch.clip(self.log_sigma(h), -5, 2)
        dist = torch.distributions.Normal(mu, torch.exp(log_sigma))
        action = mu if deterministic else dist.rsample()
        tanh_action = torch.tanh(action)
        log_prob = dist.log_prob(action).sum(-1) - torch.log(1 - tanh_action.pow(2) + 1e-6).sum(-1)
        return tanh_action, log_prob


# the dataset on the GPU
states = torch.randn(N, OBS, device=device)
actions = torch.rand(N, ACT, device=device) * 2 - 1
rewards = torch.randn(N, device=device)
next_states = torch.randn(N, OBS, device=device)
dones = (torch.rand(N, device=device) < 0.001).float()


def sample(n):
    idx = torch.randint(0, N, (n,), device=device)
    return states[idx], actions[idx], rewards[idx], next_states[idx], dones[idx]


actor = Actor().to(device)
critic = VectorizedCritic(ENSEMBLE).to(device)
target_critic = copy.deepcopy(critic)
log_alpha = torch.zeros((), device=device, requires_grad=True)
actor_opt = torch.optim.Adam(actor.parameters(), lr=1e-4)
critic_opt = torch.optim.Adam(critic.parameters(), lr=3e-4)
alpha_opt = torch.optim.Adam([log_alpha], lr=3e-4)
target_entropy = -float(ACT)
print(
    f"actor {sum(p.numel() for p in actor.parameters()) / 1e6:.2f}M critics {sum(p.numel() for p in critic.parameters()) / 1e6:.2f}M"
)


def cql_step():
    s, a, r, s2, d = sample(BATCH)
    # temperature
    pi, logp = actor(s)
    alpha_loss = (-log_alpha * (logp.detach() + target_entropy)).mean()
    alpha_opt.zero_grad(set_to_none=True)
    alpha_loss.backward()
    alpha_opt.step()
    alpha = log_alpha.exp().detach()
    # actor
    q_pi = critic(s, pi)
    actor_loss = (alpha * logp - q_pi.min(0).values).mean()
    actor_opt.zero_grad(set_to_none=True)
    actor_loss.backward()
    actor_opt.step()
    # critics
    with torch.no_grad():
        a2, logp2 = actor(s2)
        q_next = target_critic(s2, a2).min(0).values - alpha * logp2
        q_target = r + GAMMA * (1 - d) * q_next
    q_data = critic(s, a)
    td_loss = F.mse_loss(q_data, q_target.unsqueeze(0).expand_as(q_data), reduction="none").mean(1).sum()
    # conservative term over sampled actions
    s_rep = s.unsqueeze(1).repeat(1, NUM_SAMPLED, 1).view(-1, OBS)
    s2_rep = s2.unsqueeze(1).repeat(1, NUM_SAMPLED, 1).view(-1, OBS)
    rand_a = torch.empty(BATCH * NUM_SAMPLED, ACT, device=device).uniform_(-1, 1)
    with torch.no_grad():
        cur_a, cur_logp = actor(s_rep)
        next_a, next_logp = actor(s2_rep)
    q_rand = critic(s_rep, rand_a).view(ENSEMBLE, BATCH, NUM_SAMPLED)
    q_cur = critic(s_rep, cur_a).view(ENSEMBLE, BATCH, NUM_SAMPLED)
    q_next_a = critic(s_rep, next_a).view(ENSEMBLE, BATCH, NUM_SAMPLED)
    random_density = math.log(0.5**ACT)
    cat_q = torch.cat(
        [
            q_rand - random_density,
            q_next_a - next_logp.view(1, BATCH, NUM_SAMPLED),
            q_cur - cur_logp.view(1, BATCH, NUM_SAMPLED),
        ],
        dim=2,
    )
    cql_ood = torch.logsumexp(cat_q, dim=2)
    cql_loss = ((cql_ood - q_data).mean(1) * CQL_WEIGHT).sum()
    loss = td_loss + cql_loss
    critic_opt.zero_grad(set_to_none=True)
    loss.backward()
    critic_opt.step()
    with torch.no_grad():
        for tp, p in zip(target_critic.parameters(), critic.parameters()):
            tp.lerp_(p, TAU)
    return loss.item(), actor_loss.item()


for step in range(5):
    loss, aloss = cql_step()
    print(f"cql step {step} critic {loss:.3f} actor {aloss:.3f} alpha {log_alpha.exp().item():.4f}")
    if step == 0:
        report("first cql step")
report("cql steps")

actor.eval()
q_sum = torch.zeros((), device=device)
std_sum = torch.zeros((), device=device)
with torch.no_grad():
    for i in range(0, N, CHUNK):
        s = states[i : i + CHUNK]
        pi, _ = actor(s, deterministic=True)
        q = critic(s, pi)
        q_sum += q.mean(0).sum()
        std_sum += q.std(0).sum()
print(f"dataset mean Q {(q_sum / N).item():.4f} ensemble std {(std_sum / N).item():.4f}")
report("q sweep eval")

# IQL
del actor, critic, target_critic, actor_opt, critic_opt, alpha_opt, log_alpha
EXPECTILE, BETA = 0.7, 3.0


class GaussianPolicy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(OBS, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, ACT),
            nn.Tanh(),
        )
        self.log_std = nn.Parameter(torch.zeros(ACT))

    def forward(self, s):
        return torch.distributions.Normal(self.net(s), self.log_std.clamp(-5, 2).exp())


qf = VectorizedCritic(2).to(device)
q_target = copy.deepcopy(qf).requires_grad_(False)
vf = nn.Sequential(
    nn.Linear(OBS, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1)
).to(device)
policy = GaussianPolicy().to(device)
v_opt = torch.optim.AdamW(vf.parameters(), lr=3e-4, fused=amp)
q_opt = torch.optim.AdamW(qf.parameters(), lr=3e-4, fused=amp)
p_opt = torch.optim.AdamW(policy.parameters(), lr=3e-4, fused=amp)
p_sched = torch.optim.lr_scheduler.CosineAnnealingLR(p_opt, 1000)

for step in range(3):
    s, a, r, s2, d = sample(IQL_BATCH)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        with torch.no_grad():
            target_q = q_target(s, a).min(0).values
        v = vf(s).squeeze(-1)
        adv = target_q.float() - v.float()
        weight = torch.abs(EXPECTILE - (adv < 0).float())
        v_loss = (weight * adv.pow(2)).mean()
    v_opt.zero_grad(set_to_none=True)
    v_loss.backward()
    v_opt.step()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        with torch.no_grad():
            next_v = vf(s2).squeeze(-1).float()
        targets = r + (1 - d) * GAMMA * next_v
        qs = qf(s, a).float()
        q_loss = sum(F.mse_loss(q, targets) for q in qs) / len(qs)
    q_opt.zero_grad(set_to_none=True)
    q_loss.backward()
    q_opt.step()
    with torch.no_grad():
        for tp, p in zip(q_target.parameters(), qf.parameters()):
            tp.lerp_(p, TAU)
    exp_adv = torch.exp(BETA * adv.detach()).clamp(max=100.0)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        dist = policy(s)
        bc_losses = -dist.log_prob(a).sum(-1)
        p_loss = torch.mean(exp_adv * bc_losses)
    p_opt.zero_grad(set_to_none=True)
    p_loss.backward()
    p_opt.step()
    p_sched.step()
    print(f"iql step {step} v {v_loss.item():.4f} q {q_loss.item():.4f} pi {p_loss.item():.4f}")
report("iql bf16")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
