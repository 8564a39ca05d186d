"""TD3 (Fujimoto et al. 2018) written by hand for a batch of 2,048 two-link reacher arms simulated on
the GPU in torch (joint angles and velocities integrated by semi-implicit Euler, a random target per
arm, the fingertip by forward kinematics, reward minus distance minus control cost, auto-reset by
torch.where after 50 steps).

A replay buffer of 409,600 transitions preallocated on the GPU (obs, action, reward, next obs, done),
written as a ring by slice assignment and sampled by torch.randint. One critic module holds both Q
heads (two 3 x 512 MLPs) and returns (q1, q2); its target and the actor's target are deepcopies
updated by torch._foreach_lerp_. Target policy smoothing: clipped Gaussian noise on the target action;
the actor and targets are updated every 2nd critic update.

Phases: 48 environment steps with one TD3 update each (batch 4096, fp32, Adam foreach); TD3+BC
(Fujimoto & Gu 2021) offline on the filled buffer under bf16 autocast with fused Adams (lambda
2.5 / mean|Q|, 60 updates); a 100-step deterministic evaluation of 8,192 arms under inference_mode;
a checkpoint to host memory loaded into a fresh actor on the GPU and evaluated. 4 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3281)
device = "cuda" if torch.cuda.is_available() else "cpu"
ENVS, CAP, BATCH, EVAL_ENVS, WIDTH = (64, 2048, 128, 128, 64) if SMALL else (2048, 409_600, 4096, 8192, 512)
OBS, ACT = 11, 2
DT, GAMMA, TAU, POLICY_NOISE, NOISE_CLIP, EXPL = 0.05, 0.99, 0.005, 0.2, 0.5, 0.1


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Reacher:
    def __init__(self, n):
        self.n = n
        self.th = (torch.rand(n, 2, device=device) - 0.5) * 0.2
        self.thd = torch.zeros(n, 2, device=device)
        self.goal = (torch.rand(n, 2, device=device) - 0.5) * 0.4
        self.t = torch.zeros(n, dtype=torch.long, device=device)

    def tip(self):
        a = self.th[:, 0]
        b = a + self.th[:, 1]
        return torch.stack([0.1 * a.cos() + 0.11 * b.cos(), 0.1 * a.sin() + 0.11 * b.sin()], 1)

    def obs(self):
        tip = self.tip()
        return torch.cat(
            [self.th.cos(), self.th.sin(), self.goal, self.thd, tip - self.goal, self.t[:, None] / 50.0], 1
        )

    def step(self, action):
        self.thd = self.thd + DT * (10.0 * action - 0.1 * self.thd)
        self.th = self.th + DT * self.thd
        self.t += 1
        dist = (self.tip() - self.goal).norm(dim=1)
        reward = -dist - 0.01 * action.square().sum(1)
        done = self.t >= 50
        d = done[:, None]
        self.th = torch.where(d, (torch.rand(self.n, 2, device=device) - 0.5) * 0.2, self.th)
        self.thd = torch.where(d, torch.zeros_like(self.thd), self.thd)
        self.goal = torch.where(d, (torch.rand(self.n, 2, device=device) - 0.5) * 0.4, self.goal)
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        return reward, done


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(OBS, WIDTH),
            nn.ReLU(),
            nn.Linear(WIDTH, WIDTH),
            nn.ReLU(),
            nn.Linear(WIDTH, ACT),
            nn.Tanh(),
        )

    def forward(self, o):
        return self.net(o)


class TwinCritic(nn.Module):
    def __init__(self):
        super().__init__()

        def head():
            return nn.Sequential(
                nn.Linear(OBS + ACT, WIDTH),
                nn.ReLU(),
                nn.Linear(WIDTH, WIDTH),
                nn.ReLU(),
                nn.Linear(WIDTH, WIDTH),
                nn.ReLU(),
                nn.Linear(WIDTH, 1),
            )

        self.q1, self.q2 = head(), head()

    def forward(self, o, a):
        x = torch.cat([o, a], 1)
        return self.q1(x), self.q2(x)


class TD3:
    def __init__(self, fused):
        self.actor, self.critic = Actor().to(device), TwinCritic().to(device)
        self.actor_t = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_t = copy.deepcopy(self.critic).requires_grad_(False)
        self.pi_opt = torch.optim.Adam(self.actor.parameters(), lr=3e-4, fused=fused)
        self.q_opt = torch.optim.Adam(self.critic.parameters(), lr=3e-4, fused=fused)
        self.updates = 0

    def polyak(self):
        with torch.no_grad():
            for tgt, src in ((self.actor_t, self.actor), (self.critic_t, self.critic)):
                torch._foreach_lerp_(list(tgt.parameters()), list(src.parameters()), TAU)

    def update(self, o, a, r, o2, d, amp=False, bc_alpha=None):
        self.updates += 1
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            with torch.no_grad():
                noise = (torch.randn_like(a) * POLICY_NOISE).clamp(-NOISE_CLIP, NOISE_CLIP)
                a2 = (self.actor_t(o2).float() + noise).clamp(-1, 1)
                t1, t2 = self.critic_t(o2, a2)
                y = r[:, None] + GAMMA * (1 - d[:, None]) * torch.min(t1, t2).float()
            q1, q2 = self.critic(o, a)
            q_loss = F.mse_loss(q1.float(), y) + F.mse_loss(q2.float(), y)
        self.q_opt.zero_grad(set_to_none=True)
        q_loss.backward()
        self.q_opt.step()
        if self.updates % 2 == 0:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                pi = self.actor(o)
                q = self.critic(o, pi)[0].float()
                if bc_alpha is None:
                    pi_loss = -q.mean()
                else:
                    lam = bc_alpha / q.abs().mean().detach()
                    pi_loss = -lam * q.mean() + F.mse_loss(pi.float(), a)
            self.pi_opt.zero_grad(set_to_none=True)
            pi_loss.backward()
            self.pi_opt.step()
            self.polyak()
        return q_loss.detach()


obs_buf = torch.zeros(CAP, OBS, device=device)
act_buf = torch.zeros(CAP, ACT, device=device)
rew_buf = torch.zeros(CAP, device=device)
next_buf = torch.zeros(CAP, OBS, device=device)
done_buf = torch.zeros(CAP, device=device)
ptr, size = 0, 0


def sample():
    idx = torch.randint(0, size, (BATCH,), device=device)
    return obs_buf[idx], act_buf[idx], rew_buf[idx], next_buf[idx], done_buf[idx]


env = Reacher(ENVS)
agent = TD3(fused=False)
obs = env.obs()
loss = None
for step in range(48):
    with torch.no_grad():
        act = (agent.actor(obs) + EXPL * torch.randn(ENVS, ACT, device=device)).clamp(-1, 1)
    rew, done = env.step(act)
    nxt = env.obs()
    obs_buf[ptr : ptr + ENVS] = obs
    act_buf[ptr : ptr + ENVS] = act
    rew_buf[ptr : ptr + ENVS] = rew
    next_buf[ptr : ptr + ENVS] = nxt
    done_buf[ptr : ptr + ENVS] = done.float()
    ptr, size = (ptr + ENVS) % CAP, min(size + ENVS, CAP)
    obs = nxt
    loss = agent.update(*sample())
print(f"td3 critic loss {loss.item():.4f} buffer {size}")
report("td3_online")

# Offline TD3+BC on the collected buffer: states normalised by the buffer's mean and std.
mu, sd = obs_buf[:size].mean(0), obs_buf[:size].std(0) + 1e-3
obs_buf[:size].sub_(mu).div_(sd)
next_buf[:size].sub_(mu).div_(sd)
bc = TD3(fused=True)
for it in range(60):
    loss = bc.update(*sample(), amp=True, bc_alpha=2.5)
print(f"td3+bc critic loss {loss.item():.4f}")
report("td3_bc_offline")


def evaluate(actor, normalise):
    ev = Reacher(EVAL_ENVS)
    total = torch.zeros(EVAL_ENVS, device=device)
    with torch.inference_mode():
        for _ in range(100):
            o = ev.obs()
            if normalise:
                o = (o - mu) / sd
            r, _ = ev.step(actor(o))
            total += r
    return total.mean().item()


print(f"eval return online {evaluate(agent.actor, False):.3f} offline {evaluate(bc.actor, True):.3f}")
report("eval")

host = {k: v.detach().to("cpu") for k, v in bc.actor.state_dict().items()}
del agent, bc
fresh = Actor().to(device)
fresh.load_state_dict(host)
print(f"reloaded eval {evaluate(fresh, True):.3f}")
report("reload")
