"""Rainbow DQN (Hessel et al. 2018) for Atari-sized frames, written as a practitioner would on one GPU:
a Nature CNN torso with a dueling head of factorised-Gaussian NoisyLinear layers (Fortunato et al.),
C51 distributional returns over 51 atoms in [-10, 10] with the categorical projection by index_add_,
double-Q action selection, 3-step returns and prioritised replay.

The replay buffer lives on the GPU, preallocated as big tensors: 120,000 uint8 frame stacks (4 x 84 x 84),
actions, rewards, dones and priorities. 64 environments (a random stand-in for ALE, frames drawn by
torch.randint) write a transition each per step with index_copy_; minibatches of 256 are sampled
proportionally to priority**0.6 by torch.multinomial, with importance weights, and the priorities are
written back by indexing.

Phases: 24 learner steps in fp32 with Adam (eps 1.5e-4, lr 6.25e-5, clip 10); greedy acting of 512
environments for 24 steps under no_grad (noise off, eval mode); the target network synced by
load_state_dict, then 16 steps in channels_last under bf16 autocast with a fused Adam; then
empty_cache() and a large-batch priority refresh over 8,192 stored transitions in chunks under
inference_mode. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2221)
device = "cuda" if torch.cuda.is_available() else "cpu"
CAP, ENVS, BATCH, EVAL_ENVS = (512, 8, 16, 16) if SMALL else (120_000, 64, 256, 512)
ACTIONS, ATOMS, VMIN, VMAX, NSTEP, GAMMA = 18, 51, -10.0, 10.0, 3, 0.99


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class NoisyLinear(nn.Module):
    def __init__(self, n_in, n_out, sigma0=0.5):
        super().__init__()
        self.n_in, self.n_out = n_in, n_out
        self.weight_mu = nn.Parameter(torch.empty(n_out, n_in).uniform_(-(n_in**-0.5), n_in**-0.5))
        self.weight_sigma = nn.Parameter(torch.full((n_out, n_in), sigma0 / n_in**0.5))
        self.bias_mu = nn.Parameter(torch.empty(n_out).uniform_(-(n_in**-0.5), n_in**-0.5))
        self.bias_sigma = nn.Parameter(torch.full((n_out,), sigma0 / n_in**0.5))
        self.register_buffer("weight_epsilon", torch.empty(n_out, n_in))
        self.register_buffer("bias_epsilon", torch.empty(n_out))
        self.reset_noise()

    @staticmethod
    def _f(n, device):
        x = torch.randn(n, device=device)
        return x.sign() * x.abs().sqrt()

    def reset_noise(self):
        eps_in = self._f(self.n_in, self.weight_mu.device)
        eps_out = self._f(self.n_out, self.weight_mu.device)
        self.weight_epsilon.copy_(torch.outer(eps_out, eps_in))
        self.bias_epsilon.copy_(eps_out)

    def forward(self, x):
        if self.training:
            w = self.weight_mu + self.weight_sigma * self.weight_epsilon
            b = self.bias_mu + self.bias_sigma * self.bias_epsilon
            return F.linear(x, w, b)
        return F.linear(x, self.weight_mu, self.bias_mu)


class RainbowNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.torso = nn.Sequential(
            nn.Conv2d(4, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(), nn.Conv2d(64, 64, 3, 1), nn.ReLU(),
            nn.Flatten(),
        )
        self.v1, self.v2 = NoisyLinear(3136, 512), NoisyLinear(512, ATOMS)
        self.a1, self.a2 = NoisyLinear(3136, 512), NoisyLinear(512, ACTIONS * ATOMS)

    def forward(self, obs, log=False):
        h = self.torso(obs.float() / 255.0)
        v = self.v2(F.relu(self.v1(h))).view(-1, 1, ATOMS)
        a = self.a2(F.relu(self.a1(h))).view(-1, ACTIONS, ATOMS)
        q = v + a - a.mean(1, keepdim=True)
        return F.log_softmax(q, -1) if log else F.softmax(q, -1)

    def reset_noise(self):
        for m in self.modules():
            if isinstance(m, NoisyLinear):
                m.reset_noise()


support = torch.linspace(VMIN, VMAX, ATOMS, device=device)
dz = (VMAX - VMIN) / (ATOMS - 1)

# the replay buffer, preallocated on the GPU
obs_buf = torch.zeros(CAP, 4, 84, 84, dtype=torch.uint8, device=device)
act_buf = torch.zeros(CAP, dtype=torch.long, device=device)
rew_buf = torch.zeros(CAP, device=device)
done_buf = torch.zeros(CAP, dtype=torch.bool, device=device)
prio_buf = torch.zeros(CAP, device=device)
for start in range(0, CAP, 8192):  # a warm-up that filled the buffer
    n = min(8192, CAP - start)
    obs_buf[start : start + n] = torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8, device=device)
act_buf.random_(0, ACTIONS)
rew_buf.copy_(torch.randn(CAP, device=device).clamp_(-1, 1))
done_buf.copy_(torch.rand(CAP, device=device) < 0.01)
prio_buf.fill_(1.0)
write_pos = 0

online, target = RainbowNet().to(device), RainbowNet().to(device)
target.load_state_dict(online.state_dict())
for p in target.parameters():
    p.requires_grad_(False)
opt = torch.optim.Adam(online.parameters(), lr=6.25e-5, eps=1.5e-4)
print("after buffer and nets", torch.cuda.memory_allocated() if device == "cuda" else 0)


def act_and_store(obs):
    """64 environments act (noisy exploration) and write their transitions into the ring buffer."""
    global write_pos
    with torch.no_grad():
        q = (online(obs) * support).sum(-1)
    a = q.argmax(1)
    idx = (torch.arange(obs.shape[0], device=device) + write_pos) % CAP
    obs_buf.index_copy_(0, idx, obs)
    act_buf.index_copy_(0, idx, a)
    rew_buf.index_copy_(0, idx, torch.randn(obs.shape[0], device=device).clamp_(-1, 1))
    done_buf.index_copy_(0, idx, torch.rand(obs.shape[0], device=device) < 0.01)
    prio_buf.index_copy_(0, idx, prio_buf.max().expand(obs.shape[0]))
    write_pos = (write_pos + obs.shape[0]) % CAP


def sample(beta):
    probs = prio_buf.pow(0.6)
    idx = torch.multinomial(probs, BATCH, replacement=True)
    w = (CAP * probs[idx] / probs.sum()).pow(-beta)
    w = w / w.max()
    # n-step return and bootstrap index (episode ends cut the sum)
    ret = torch.zeros(BATCH, device=device)
    alive = torch.ones(BATCH, device=device)
    for k in range(NSTEP):
        j = (idx + k) % CAP
        ret += alive * GAMMA**k * rew_buf[j]
        alive = alive * (~done_buf[j]).float()
    nxt = (idx + NSTEP) % CAP
    return obs_buf[idx], act_buf[idx], ret, alive, obs_buf[nxt], idx, w


def project(next_probs, ret, alive):
    """C51's categorical projection of r + gamma^n z onto the fixed support, by index_add_."""
    tz = (ret[:, None] + alive[:, None] * GAMMA**NSTEP * support[None]).clamp(VMIN, VMAX)
    b = (tz - VMIN) / dz
    lo, hi = b.floor().long(), b.ceil().long()
    lo = torch.where((hi > 0) & (lo == hi), lo - 1, lo)
    hi = torch.where((lo < ATOMS - 1) & (lo == hi), hi + 1, hi)
    m = torch.zeros(ret.shape[0] * ATOMS, device=ret.device)
    offset = (torch.arange(ret.shape[0], device=ret.device) * ATOMS)[:, None]
    m.index_add_(0, (lo + offset).view(-1), (next_probs * (hi.float() - b)).view(-1))
    m.index_add_(0, (hi + offset).view(-1), (next_probs * (b - lo.float())).view(-1))
    return m.view(-1, ATOMS)


def learn_step(optimizer, beta, autocast_dtype=None, channels_last=False):
    obs, a, ret, alive, nobs, idx, w = sample(beta)
    if channels_last:
        obs, nobs = obs.contiguous(memory_format=torch.channels_last), nobs.contiguous(memory_format=torch.channels_last)
    online.reset_noise()
    target.reset_noise()
    with torch.autocast("cuda", dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
        with torch.no_grad():
            a_star = (online(nobs) * support).sum(-1).argmax(1)
            next_probs = target(nobs)[torch.arange(BATCH, device=device), a_star].float()
            m = project(next_probs, ret, alive)
        log_p = online(obs, log=True)[torch.arange(BATCH, device=device), a].float()
        loss_per = -(m * log_p).sum(-1)
    loss = (w * loss_per).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(online.parameters(), 10.0)
    optimizer.step()
    prio_buf[idx] = loss_per.detach().clamp_min(1e-6)
    return loss.detach()


env_obs = torch.randint(0, 256, (ENVS, 4, 84, 84), dtype=torch.uint8, device=device)
losses = []
for step in range(24):
    act_and_store(env_obs)
    env_obs = torch.roll(env_obs, -1, 1)
    env_obs[:, -1] = torch.randint(0, 256, (ENVS, 84, 84), dtype=torch.uint8, device=device)
    losses.append(learn_step(opt, beta=0.4 + 0.01 * step))
    if step % 8 == 7:
        target.load_state_dict(online.state_dict())
print("phase 0 losses", torch.stack(losses)[[0, -1]].tolist())
report("train fp32")

online.eval()
frames = torch.randint(0, 256, (EVAL_ENVS, 4, 84, 84), dtype=torch.uint8, device=device)
total_q = torch.zeros((), device=device)
with torch.no_grad():
    for t in range(24):
        q = (online(frames) * support).sum(-1)
        total_q += q.max(1).values.mean()
        frames = torch.cat([frames[:, 1:], torch.randint(0, 256, (EVAL_ENVS, 1, 84, 84), dtype=torch.uint8, device=device)], 1)
online.train()
print("eval mean max-Q", (total_q / 24).item())
report("eval no_grad")

target.load_state_dict(online.state_dict())
online = online.to(memory_format=torch.channels_last)
target = target.to(memory_format=torch.channels_last)
del opt
opt = torch.optim.Adam(online.parameters(), lr=6.25e-5, eps=1.5e-4, fused=True)
losses = []
for step in range(16):
    act_and_store(env_obs)
    losses.append(learn_step(opt, beta=0.6, autocast_dtype=torch.bfloat16, channels_last=True))
print("phase 2 losses", torch.stack(losses)[[0, -1]].tolist())
report("train bf16 channels_last fused")

del opt
if device == "cuda":
    torch.cuda.empty_cache()
online.eval()
with torch.inference_mode():
    refresh = torch.randint(0, CAP, (8192 if not SMALL else 64,), device=device)
    for chunk in refresh.split(2048):
        p = online(obs_buf[chunk])
        prio_buf[chunk] = (p * support).sum(-1).abs().max(1).values + 1e-6
print("priorities", prio_buf.sum().item())
report("priority refresh inference_mode")
