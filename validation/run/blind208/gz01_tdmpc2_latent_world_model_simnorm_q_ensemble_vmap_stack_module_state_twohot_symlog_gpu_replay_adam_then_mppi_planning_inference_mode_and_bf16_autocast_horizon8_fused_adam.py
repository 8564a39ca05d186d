"""TD-MPC2-like latent world model (Hansen et al. 2024) trained from a GPU replay buffer of random episodes.

Model (the 5M-parameter TD-MPC2 shape): an MLP encoder of 223-dimensional proprioceptive states into a
512-dimensional latent normalised by SimNorm (softmax over groups of 8), a latent dynamics MLP on
(z, a) with LayerNorm + Mish, a reward head and an ensemble of 5 Q heads (Dropout 0.01 on the first
layer) predicting 101-bin two-hot distributions in symlog space, and a tanh-Gaussian policy prior.
The Q ensemble is one module built by torch.func.stack_module_state and called by vmap(functional_call)
with randomness="different", as TD-MPC2's Ensemble layer does; the target Qs are a detached copy
updated by torch._foreach_lerp_ (polyak 0.01).

Data: 400 episodes of 501 steps (states, actions 38-d, rewards) held on the GPU; a batch is 2048
random windows of horizon + 1 steps gathered with an arange offset.

Phases: the first update (fp32, Adam with the encoder at 0.3x lr, clip 20, horizon 3, a separate
Adam for the policy with a running-percentile Q scale); 3 more updates; MPPI planning for 128
environments under inference_mode (512 trajectories of horizon 3, 24 from the policy prior, 6
iterations, 64 elites, 10 environment steps in a learned-model loop); then the same agent trained with
horizon 8 under bf16 autocast with fresh fused Adams. 4 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2081)
if SMALL:
    OBS, ACT, LATENT, MLP, NUM_Q, EPISODES, EP_LEN, BATCH = 17, 6, 64, 64, 5, 8, 51, 32
    ENVS, SAMPLES, PI_TRAJ, ITERS, ELITES, ENV_STEPS = 4, 32, 4, 2, 8, 2
else:
    OBS, ACT, LATENT, MLP, NUM_Q, EPISODES, EP_LEN, BATCH = 223, 38, 512, 512, 5, 400, 501, 2048
    ENVS, SAMPLES, PI_TRAJ, ITERS, ELITES, ENV_STEPS = 128, 512, 24, 6, 64, 10
SIMNORM, NUM_BINS, VMIN, VMAX = 8, 101, -10.0, 10.0
BIN = (VMAX - VMIN) / (NUM_BINS - 1)
RHO, GAMMA, TAU, ENT = 0.5, 0.99, 0.01, 1e-4
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def symlog(x):
    return torch.sign(x) * torch.log(1 + torch.abs(x))


def symexp(x):
    return torch.sign(x) * (torch.exp(torch.abs(x)) - 1)


def two_hot(x):
    """(N, 1) scalars -> (N, NUM_BINS) two-hot targets in symlog space."""
    x = torch.clamp(symlog(x), VMIN, VMAX).squeeze(1)
    pos = (x - VMIN) / BIN
    idx = torch.floor(pos).long()
    off = (pos - idx).unsqueeze(-1)
    soft = torch.zeros(x.shape[0], NUM_BINS, device=x.device, dtype=x.dtype)
    soft = soft.scatter(1, idx.unsqueeze(1), 1 - off)
    return soft.scatter_add(1, (idx.unsqueeze(1) + 1) % NUM_BINS, off)


BINS = torch.linspace(VMIN, VMAX, NUM_BINS, device=device)


def two_hot_inv(logits):
    return symexp(torch.sum(F.softmax(logits, dim=-1) * BINS, dim=-1, keepdim=True))


def soft_ce(pred, target):
    pred = F.log_softmax(pred, dim=-1)
    return -(two_hot(target) * pred).sum(-1, keepdim=True)


class SimNorm(nn.Module):
    def forward(self, x):
        shp = x.shape
        x = x.view(*shp[:-1], -1, SIMNORM)
        return F.softmax(x, dim=-1).view(*shp)


class NormedLinear(nn.Linear):
    def __init__(self, i, o, dropout=0.0, act=None):
        super().__init__(i, o)
        self.ln = nn.LayerNorm(o)
        self.act = act if act is not None else nn.Mish(inplace=False)
        self.dropout = nn.Dropout(dropout) if dropout else None

    def forward(self, x):
        x = super().forward(x)
        if self.dropout is not None:
            x = self.dropout(x)
        return self.act(self.ln(x))


def mlp(i, hidden, o, act=None, dropout=0.0):
    layers = [NormedLinear(i, hidden[0], dropout=dropout)]
    layers += [NormedLinear(a, b) for a, b in zip(hidden[:-1], hidden[1:])]
    layers.append(NormedLinear(hidden[-1], o, act=act) if act is not None else nn.Linear(hidden[-1], o))
    return nn.Sequential(*layers)


class Ensemble(nn.Module):
    """TD-MPC2's vectorised ensemble: stacked parameters called by vmap(functional_call)."""

    def __init__(self, modules):
        super().__init__()
        params, _ = stack_module_state(modules)
        self.params = nn.ParameterDict({k.replace(".", "_"): nn.Parameter(v) for k, v in params.items()})
        self.names = list(params.keys())
        self._base = [copy.deepcopy(modules[0]).to("meta")]  # a plain list: not a submodule

    def _call(self, params, x):
        return functional_call(self._base[0], dict(zip(self.names, params)), (x,))

    def forward(self, x):
        params = [self.params[k.replace(".", "_")] for k in self.names]
        return vmap(self._call, (0, None), randomness="different")(params, x)


class WorldModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = mlp(OBS, [256], LATENT, act=SimNorm())
        self.dynamics = mlp(LATENT + ACT, [MLP, MLP], LATENT, act=SimNorm())
        self.reward = mlp(LATENT + ACT, [MLP, MLP], NUM_BINS)
        self.pi = mlp(LATENT, [MLP, MLP], 2 * ACT)
        self.Qs = Ensemble([mlp(LATENT + ACT, [MLP, MLP], NUM_BINS, dropout=0.01) for _ in range(NUM_Q)])
        self.target_Qs = copy.deepcopy(self.Qs).requires_grad_(False)

    def next(self, z, a):
        return self.dynamics(torch.cat([z, a], dim=-1))

    def Q(self, z, a, target=False, kind="min"):
        za = torch.cat([z, a], dim=-1)
        out = (self.target_Qs if target else self.Qs)(za)
        idx = torch.randperm(NUM_Q, device=z.device)[:2]
        q1, q2 = two_hot_inv(out[idx[0]]), two_hot_inv(out[idx[1]])
        return torch.min(q1, q2) if kind == "min" else (q1 + q2) / 2

    def policy(self, z):
        mu, log_std = self.pi(z).chunk(2, dim=-1)
        log_std = -10 + 0.5 * (2 + 10) * (torch.tanh(log_std) + 1)
        eps = torch.randn_like(mu)
        pre = mu + eps * log_std.exp()
        log_prob = (-0.5 * eps.pow(2) - log_std).sum(-1, keepdim=True) - 0.5 * ACT * torch.log(
            torch.tensor(2 * torch.pi, device=z.device)
        )
        a = torch.tanh(pre)
        log_prob = log_prob - torch.log(F.relu(1 - a.pow(2)) + 1e-6).sum(-1, keepdim=True)
        return a, log_prob


class RunningScale:
    def __init__(self):
        self.value = torch.ones(1, device=device)

    def update(self, x):
        p = torch.quantile(x.detach().float().flatten(), torch.tensor([0.05, 0.95], device=x.device))
        self.value.lerp_((p[1] - p[0]).clamp_min(1.0).view(1), TAU)

    def __call__(self, x):
        return x / self.value


# replay buffer on the GPU
obs_buf = torch.randn(EPISODES, EP_LEN, OBS, device=device)
act_buf = torch.rand(EPISODES, EP_LEN, ACT, device=device) * 2 - 1
rew_buf = torch.rand(EPISODES, EP_LEN, 1, device=device)


def sample(horizon):
    ep = torch.randint(0, EPISODES, (BATCH, 1), device=device)
    start = torch.randint(0, EP_LEN - horizon - 1, (BATCH, 1), device=device)
    t = start + torch.arange(horizon + 1, device=device)
    obs = obs_buf[ep, t].transpose(0, 1).contiguous()  # (H+1, B, OBS)
    act = act_buf[ep, t[:, :-1]].transpose(0, 1).contiguous()
    rew = rew_buf[ep, t[:, :-1]].transpose(0, 1).contiguous()
    return obs, act, rew


def make_opts(model, fused):
    enc = list(model.encoder.parameters())
    rest = [p for n, p in model.named_parameters() if not n.startswith(("encoder", "pi", "target_Qs"))]
    optim = torch.optim.Adam([{"params": enc, "lr": 3e-4 * 0.3}, {"params": rest}], lr=3e-4, fused=fused)
    pi_optim = torch.optim.Adam(model.pi.parameters(), lr=3e-4, eps=1e-5, fused=fused)
    return optim, pi_optim


def update(model, optim, pi_optim, scale, horizon, dtype):
    obs, action, reward = sample(horizon)
    with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None and amp):
        with torch.no_grad():
            next_z = model.encoder(obs[1:])
            a_next, _ = model.policy(next_z)
            td = reward + GAMMA * model.Q(next_z, a_next, target=True, kind="min")
        zs = [model.encoder(obs[0])]
        consistency = 0.0
        for t in range(horizon):
            z = model.next(zs[-1], action[t])
            consistency = consistency + F.mse_loss(z.float(), next_z[t].float()) * RHO**t
            zs.append(z)
        zs = torch.stack(zs)
        _zs = zs[:-1]
        za = torch.cat([_zs, action], dim=-1)
        qs = model.Qs(za)  # (NUM_Q, H, B, NUM_BINS)
        reward_preds = model.reward(za)
        reward_loss, value_loss = 0.0, 0.0
        for t in range(horizon):
            reward_loss = reward_loss + soft_ce(reward_preds[t].float(), reward[t]).mean() * RHO**t
            for q in range(NUM_Q):
                value_loss = value_loss + soft_ce(qs[q, t].float(), td[t].float()).mean() * RHO**t
        loss = (20 * consistency + 0.1 * reward_loss + 0.1 * value_loss) / horizon
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 20.0)
    optim.step()
    optim.zero_grad(set_to_none=True)

    # policy update on detached latents
    with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None and amp):
        z = zs.detach()
        a, log_prob = model.policy(z)
        q = model.Q(z, a, kind="avg")
        scale.update(q[0])
        q = scale(q)
        rho = torch.pow(RHO, torch.arange(len(q), device=device))
        pi_loss = ((ENT * log_prob - q).mean(dim=(1, 2)) * rho).mean()
    pi_loss.backward()
    torch.nn.utils.clip_grad_norm_(model.pi.parameters(), 20.0)
    pi_optim.step()
    pi_optim.zero_grad(set_to_none=True)
    model.Qs.zero_grad(set_to_none=True)
    with torch.no_grad():
        tgt = list(model.target_Qs.params.values())
        src = [p.detach() for p in model.Qs.params.values()]
        torch._foreach_lerp_(tgt, src, TAU)
    return loss.item(), pi_loss.item()


@torch.inference_mode()
def plan(model, z, mean_prev):
    """MPPI over learned dynamics, TD-MPC2's plan(): policy-prior trajectories plus Gaussian samples."""
    n = z.shape[0]
    horizon = 3
    pi_actions = torch.empty(horizon, n, PI_TRAJ, ACT, device=device)
    _z = z.unsqueeze(1).repeat(1, PI_TRAJ, 1)
    for t in range(horizon - 1):
        pi_actions[t], _ = model.policy(_z)
        _z = model.next(_z, pi_actions[t])
    pi_actions[-1], _ = model.policy(_z)
    z = z.unsqueeze(1).repeat(1, SAMPLES, 1)
    mean = torch.cat([mean_prev[1:], torch.zeros_like(mean_prev[:1])])
    std = torch.full((horizon, n, ACT), 2.0, device=device)
    actions = torch.empty(horizon, n, SAMPLES, ACT, device=device)
    actions[:, :, :PI_TRAJ] = pi_actions
    for _ in range(ITERS):
        r = torch.randn(horizon, n, SAMPLES - PI_TRAJ, ACT, device=device)
        actions[:, :, PI_TRAJ:] = (mean.unsqueeze(2) + std.unsqueeze(2) * r).clamp(-1, 1)
        G, discount, _z = 0, 1, z
        for t in range(horizon):
            reward = two_hot_inv(model.reward(torch.cat([_z, actions[t]], dim=-1)))
            _z = model.next(_z, actions[t])
            G = G + discount * reward
            discount = discount * GAMMA
        a_last, _ = model.policy(_z)
        value = G + discount * model.Q(_z, a_last, kind="avg")
        elite_idxs = torch.topk(value.squeeze(-1), ELITES, dim=1).indices  # (n, ELITES)
        elite_value = torch.gather(value.squeeze(-1), 1, elite_idxs)
        elite_actions = torch.gather(actions, 2, elite_idxs[None, :, :, None].expand(horizon, n, ELITES, ACT))
        score = torch.exp(0.5 * (elite_value - elite_value.max(1, keepdim=True).values))
        score = score / score.sum(1, keepdim=True)
        mean = (score[None, :, :, None] * elite_actions).sum(2)
        std = torch.sqrt((score[None, :, :, None] * (elite_actions - mean.unsqueeze(2)) ** 2).sum(2)).clamp(
            0.05, 2
        )
    idx = torch.multinomial(score, 1).squeeze(1)
    a = elite_actions[0, torch.arange(n, device=device), idx]
    return (a + std[0] * torch.randn_like(a)).clamp(-1, 1), mean


model = WorldModel().to(device)
print(f"params {sum(p.numel() for p in model.parameters() if p.requires_grad) / 1e6:.1f}M")
optim, pi_optim = make_opts(model, fused=False)
scale = RunningScale()

model.train()
for step in range(4):
    loss, pi_loss = update(model, optim, pi_optim, scale, 3, None)
    print(f"update {step} loss {loss:.4f} pi {pi_loss:.4f}")
    if step == 0:
        report("first update")
report("updates")

model.eval()
obs = torch.randn(ENVS, OBS, device=device)
mean = torch.zeros(3, ENVS, ACT, device=device)
total = torch.zeros(ENVS, 1, device=device)
with torch.inference_mode():
    z = model.encoder(obs)
    for _ in range(ENV_STEPS):
        a, mean = plan(model, z, mean)
        total += two_hot_inv(model.reward(torch.cat([z, a], dim=-1)))
        z = model.next(z, a)
print(f"planned return {total.mean().item():.4f}")
report("mppi planning")

model.train()
optim, pi_optim = make_opts(model, fused=amp)
for step in range(2):
    loss, pi_loss = update(model, optim, pi_optim, scale, 8, torch.bfloat16)
    print(f"bf16 horizon 8 update {step} loss {loss:.4f} pi {pi_loss:.4f}")
report("bf16 horizon 8")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
