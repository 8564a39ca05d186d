"""PPO in the rl_games / Isaac Gym style: thousands of environments simulated as tensors on the GPU.

Environment: a batched locomotion-like toy (60-d observations, 8-d torques; positions and velocities
integrated with torch ops, a per-env progress buffer, terminations by torch.where on a height test and
an episode limit of 1,000, resets by torch.where, never by indexing a value-dependent subset).

Agent (rl_games' A2C continuous): an MLP trunk [1024, 512, 256] with ELU shared by a Gaussian head
with a state-independent log std and a value head; running mean/std normalisation of observations
(batched Welford update) and of values; horizon 32 x 4,096 environments = 131,072 samples, GAE
(gamma 0.99, lambda 0.95) by a reversed loop, 5 epochs of 4 minibatches of 32,768 with advantage
normalisation, the clipped surrogate, clipped value loss, entropy bonus and a bounds loss, fp16
autocast with GradScaler (rl_games' mixed_precision), Adam, grad norm clipped at 1.0 and rl_games'
adaptive KL learning rate.

Phases: the first rollout (no_grad); the first PPO update; 2 more iterations; a deterministic
evaluation of 200 steps under inference_mode; then, after del and empty_cache, a pixel-based PPO on
1,024 environments with 64x64 RGB uint8 observations through an IMPALA CNN (15 conv layers in 3
residual stages) with bf16 autocast and a fused Adam (horizon 16, 2 epochs of 4 minibatches). 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2083)
if SMALL:
    ENVS, HORIZON, MINIBATCHES, EPOCHS, HIDDEN, EVAL_STEPS = 64, 8, 2, 2, [64, 32, 16], 10
    PIX_ENVS, PIX_HORIZON, PIX_RES = 16, 4, 64
else:
    ENVS, HORIZON, MINIBATCHES, EPOCHS, HIDDEN, EVAL_STEPS = 4096, 32, 4, 5, [1024, 512, 256], 200
    PIX_ENVS, PIX_HORIZON, PIX_RES = 1024, 16, 64
OBS, ACT, MAX_LEN = 60, 8, 1000
GAMMA, LAM, CLIP, KL_TARGET = 0.99, 0.95, 0.2, 0.008
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class LocomotionEnv:
    """All environments as tensors: q (positions), qd (velocities), height, progress."""

    def __init__(self, n):
        self.n = n
        self.q = torch.randn(n, 20, device=device) * 0.1
        self.qd = torch.zeros(n, 20, device=device)
        self.height = torch.full((n,), 0.55, device=device)
        self.progress = torch.zeros(n, dtype=torch.long, device=device)
        self.coupling = torch.randn(ACT, 20, device=device) * 0.3

    def obs(self):
        heading = torch.stack([torch.sin(self.q[:, 0]), torch.cos(self.q[:, 0])], dim=1)
        return torch.cat([self.q, self.qd, heading, self.height[:, None], self.q[:, :17].tanh()], dim=1)

    def step(self, action):
        torque = action.clamp(-1, 1) @ self.coupling
        self.qd = 0.98 * self.qd + 0.05 * (torque - 0.1 * self.q) + 0.01 * torch.randn_like(self.qd)
        self.q = self.q + 0.05 * self.qd
        self.height = 0.55 + 0.1 * torch.tanh(self.q[:, 1]) - 0.02 * self.qd[:, 2].abs()
        self.progress += 1
        reward = self.qd[:, 0] - 0.005 * action.pow(2).sum(1) + 0.5
        done = (self.height < 0.31) | (self.progress >= MAX_LEN)
        reset = done.unsqueeze(1)
        self.q = torch.where(reset, torch.randn_like(self.q) * 0.1, self.q)
        self.qd = torch.where(reset, torch.zeros_like(self.qd), self.qd)
        self.height = torch.where(done, torch.full_like(self.height, 0.55), self.height)
        self.progress = torch.where(done, torch.zeros_like(self.progress), self.progress)
        return self.obs(), reward, done


class RunningMeanStd(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.ones((), dtype=torch.float64))

    def update(self, x):
        x = x.double()
        batch_mean, batch_var, n = x.mean(0), x.var(0), x.shape[0]
        delta = batch_mean - self.mean
        tot = self.count + n
        self.mean += delta * n / tot
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * self.count * n / tot
        self.var = m2 / tot
        self.count = tot

    def forward(self, x, unnorm=False):
        if unnorm:
            return (x * torch.sqrt(self.var.float() + 1e-5) + self.mean.float()).clamp(-5, 5)
        return ((x - self.mean.float()) / torch.sqrt(self.var.float() + 1e-5)).clamp(-5, 5)


class ActorCritic(nn.Module):
    def __init__(self, encoder, feat):
        super().__init__()
        self.encoder = encoder
        self.mu = nn.Linear(feat, ACT)
        self.log_std = nn.Parameter(torch.zeros(ACT))
        self.value = nn.Linear(feat, 1)

    def forward(self, obs):
        h = self.encoder(obs)
        mu = self.mu(h)
        return mu, self.log_std.expand_as(mu), self.value(h)


def mlp_encoder():
    layers, last = [], OBS
    for h in HIDDEN:
        layers += [nn.Linear(last, h), nn.ELU()]
        last = h
    return nn.Sequential(*layers), last


class ResidualBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv0 = nn.Conv2d(c, c, 3, padding=1)
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


class ImpalaCNN(nn.Module):
    def __init__(self):
        super().__init__()
        stages, c_in = [], 3
        for c in (16, 32, 32):
            stages += [
                nn.Conv2d(c_in, c, 3, padding=1),
                nn.MaxPool2d(3, 2, padding=1),
                ResidualBlock(c),
                ResidualBlock(c),
            ]
            c_in = c
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(32 * 8 * 8, 256)

    def forward(self, x):
        x = self.stages(x.float() / 255.0)
        return F.relu(self.fc(F.relu(x).flatten(1)))


def gaussian_log_prob(a, mu, log_std):
    return (-0.5 * ((a - mu) / log_std.exp()).pow(2) - log_std - 0.9189385332046727).sum(-1)


def gae(rewards, values, dones, last_value):
    adv = torch.zeros_like(rewards)
    last = torch.zeros_like(last_value)
    for t in reversed(range(rewards.shape[0])):
        next_v = last_value if t == rewards.shape[0] - 1 else values[t + 1]
        nonterm = 1.0 - dones[t].float()
        delta = rewards[t] + GAMMA * next_v * nonterm - values[t]
        last = delta + GAMMA * LAM * nonterm * last
        adv[t] = last
    return adv


def ppo_update(model, opt, scaler, buf, obs_norm, value_norm, dtype, epochs, minibatches):
    n = buf["obs"].shape[0]
    mb = n // minibatches
    kls = []
    for _ in range(epochs):
        perm = torch.randperm(n, device=device)
        for i in range(minibatches):
            idx = perm[i * mb : (i + 1) * mb]
            obs = buf["obs"][idx]
            if obs_norm is not None:
                obs = obs_norm(obs)
            with torch.autocast("cuda", dtype=dtype, enabled=amp):
                mu, log_std, value = model(obs)
            mu, log_std, value = mu.float(), log_std.float(), value.float().squeeze(-1)
            adv = buf["adv"][idx]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            logp = gaussian_log_prob(buf["actions"][idx], mu, log_std)
            ratio = torch.exp(logp - buf["logp"][idx])
            surr = torch.max(-adv * ratio, -adv * ratio.clamp(1 - CLIP, 1 + CLIP)).mean()
            old_v, ret = buf["values"][idx], buf["returns"][idx]
            v_clipped = old_v + (value - old_v).clamp(-CLIP, CLIP)
            v_loss = torch.max((value - ret).pow(2), (v_clipped - ret).pow(2)).mean()
            entropy = (log_std + 1.4189385332046727).sum(-1).mean()
            bound = (F.relu(mu - 1.1).pow(2) + F.relu(-1.1 - mu).pow(2)).sum(-1).mean()
            loss = surr + 2.0 * v_loss - 0.0 * entropy + 1e-4 * bound
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            with torch.no_grad():
                old_mu, old_log_std = buf["mu"][idx], buf["log_std"][idx]
                kl = (
                    (
                        log_std
                        - old_log_std
                        + (old_log_std.exp().pow(2) + (old_mu - mu).pow(2)) / (2 * log_std.exp().pow(2))
                        - 0.5
                    )
                    .sum(-1)
                    .mean()
                )
            kls.append(kl)
        # rl_games' adaptive learning rate from the epoch's mean KL
        kl = torch.stack(kls).mean().item()
        for g in opt.param_groups:
            if kl > 2 * KL_TARGET:
                g["lr"] = max(g["lr"] / 1.5, 1e-6)
            elif kl < 0.5 * KL_TARGET:
                g["lr"] = min(g["lr"] * 1.5, 1e-2)
    return loss.item()


def rollout(env, model, obs, horizon, obs_norm, value_norm, obs_shape, obs_dtype):
    n = env.n
    buf = {
        "obs": torch.zeros(horizon, n, *obs_shape, dtype=obs_dtype, device=device),
        "actions": torch.zeros(horizon, n, ACT, device=device),
        "logp": torch.zeros(horizon, n, device=device),
        "mu": torch.zeros(horizon, n, ACT, device=device),
        "log_std": torch.zeros(horizon, n, ACT, device=device),
        "values": torch.zeros(horizon, n, device=device),
        "rewards": torch.zeros(horizon, n, device=device),
        "dones": torch.zeros(horizon, n, dtype=torch.bool, device=device),
    }
    with torch.no_grad():
        for t in range(horizon):
            buf["obs"][t] = obs
            x = obs_norm(obs) if obs_norm is not None else obs
            mu, log_std, value = model(x)
            action = mu + log_std.exp() * torch.randn_like(mu)
            buf["actions"][t], buf["mu"][t], buf["log_std"][t] = action, mu, log_std
            buf["logp"][t] = gaussian_log_prob(action, mu, log_std)
            buf["values"][t] = (
                value_norm(value.squeeze(-1), unnorm=True) if value_norm is not None else value.squeeze(-1)
            )
            obs, reward, done = env.step(action)
            buf["rewards"][t], buf["dones"][t] = reward, done
        x = obs_norm(obs) if obs_norm is not None else obs
        last_value = model(x)[2].squeeze(-1)
        if value_norm is not None:
            last_value = value_norm(last_value, unnorm=True)
        adv = gae(buf["rewards"], buf["values"], buf["dones"], last_value)
        buf["returns"] = adv + buf["values"]
        buf["adv"] = adv
        if obs_norm is not None:
            obs_norm.update(buf["obs"].view(-1, *obs_shape))
        if value_norm is not None:
            value_norm.update(buf["returns"].view(-1, 1))
            buf["values"] = value_norm(buf["values"].unsqueeze(-1)).squeeze(-1)
            buf["returns"] = value_norm(buf["returns"].unsqueeze(-1)).squeeze(-1)
    flat = {
        k: v.reshape(horizon * n, *v.shape[2:]) for k, v in buf.items() if k != "rewards" and k != "dones"
    }
    return flat, obs


env = LocomotionEnv(ENVS)
encoder, feat = mlp_encoder()
model = ActorCritic(encoder, feat).to(device)
obs_norm = RunningMeanStd(OBS).to(device)
value_norm = RunningMeanStd(1).to(device)
opt = torch.optim.Adam(model.parameters(), lr=3e-4, eps=1e-8)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")

obs = env.obs()
for it in range(3):
    buf, obs = rollout(env, model, obs, HORIZON, obs_norm, value_norm, (OBS,), torch.float32)
    if it == 0:
        report("first rollout")
    loss = ppo_update(model, opt, scaler, buf, obs_norm, value_norm, torch.float16, EPOCHS, MINIBATCHES)
    print(f"iteration {it} loss {loss:.4f} lr {opt.param_groups[0]['lr']:.2e} scale {scaler.get_scale()}")
    del buf
    if it == 0:
        report("first ppo update")
report("iterations 1-2")

model.eval()
with torch.inference_mode():
    eval_env = LocomotionEnv(ENVS)
    o = eval_env.obs()
    ret = torch.zeros(ENVS, device=device)
    for _ in range(EVAL_STEPS):
        mu, _, _ = model(obs_norm(o))
        o, r, d = eval_env.step(mu)
        ret += r
print(f"deterministic eval mean return {ret.mean().item():.3f}")
report("deterministic eval")


class PixelEnv(LocomotionEnv):
    """The same dynamics rendered to 64x64 RGB uint8 frames by a fixed random projection."""

    def __init__(self, n):
        super().__init__(n)
        self.render_w = torch.randn(40, 3 * 16 * 16, device=device)

    def obs(self):
        low = torch.sigmoid(torch.cat([self.q, self.qd], dim=1) @ self.render_w).view(self.n, 3, 16, 16)
        img = F.interpolate(low, size=(PIX_RES, PIX_RES), mode="bilinear", align_corners=False)
        return (img * 255).to(torch.uint8)


del model, opt, scaler, encoder, eval_env, o
torch.cuda.empty_cache() if device == "cuda" else None
pix_env = PixelEnv(PIX_ENVS)
model = ActorCritic(ImpalaCNN(), 256).to(device)
opt = torch.optim.Adam(model.parameters(), lr=5e-4, eps=1e-5, fused=amp)
scaler = torch.amp.GradScaler("cuda", enabled=False)
model.train()
obs = pix_env.obs()
for it in range(2):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        buf, obs = rollout(pix_env, model, obs, PIX_HORIZON, None, None, (3, PIX_RES, PIX_RES), torch.uint8)
    for k in ("mu", "log_std"):
        buf[k] = buf[k].float()
    loss = ppo_update(model, opt, scaler, buf, None, None, torch.bfloat16, 2, 4)
    print(f"pixel iteration {it} loss {loss:.4f}")
    del buf
report("pixel ppo bf16")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
