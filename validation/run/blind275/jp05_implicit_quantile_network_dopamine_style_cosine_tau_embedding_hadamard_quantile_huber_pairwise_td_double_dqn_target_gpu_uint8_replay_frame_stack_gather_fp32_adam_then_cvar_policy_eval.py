"""Implicit Quantile Networks for distributional RL (Dabney et al. 2018) trained the way google/dopamine's
`ImplicitQuantileAgent` (jax/agents/implicit_quantile) and its PyTorch ports write it, on a synthetic
Atari-like stream held on the GPU. The network: the Nature-DQN torso on 4 stacked 84 x 84 uint8 frames (`/
255.`, convolutions 32 8x8/4, 64 4x4/2, 64 3x3/1 -> 3,136), a quantile embedding of N sampled fractions tau
(`cos(pi * i * tau)` for i = 0..63, Linear 64 -> 3,136, ReLU), the torso's state embedding tiled N times and
multiplied element-wise with it (`state.repeat(N, 1) * phi`), Linear 512, ReLU, Linear 18 actions: quantile
values of shape (N, B, A). Training: a GPU replay of 150,000 uint8 frames (1.06 GB) written by `copy_` from 64
synthetic environments, stacked states gathered by index arithmetic (`(idx[:, None] + arange(-3, 1)) %
capacity`), batches of 256 transitions with 3-step returns; online quantiles at N = 64 taus for the taken
actions (`gather`), the target: double DQN (the online net at K = 32 taus picks argmax of the mean over
quantiles at the next state, the target net's N' = 64 quantiles of that action), r + gamma^3 * (1 - done) *
Z'; the pairwise Bellman errors (256, 64, 64), Huber with kappa 1, weighted by `abs(tau - (td.detach() <
0).float())`, summed over the online quantiles and averaged over the target ones; Adam (lr 5e-5, eps 3.125e-4)
in fp32 with TF32 matmuls. Acting: epsilon-greedy on the online net's mean over 32 taus under no_grad for the
64 environments between updates; the target network synced by `load_state_dict` every 4 updates. Phase 0: the
replay (filled) and both networks. Phase 1: 16 acting + update iterations. Phase 2: an inference_mode
evaluation of 512 states: the risk-neutral greedy policy (32 taus) and a CVaR(0.25) policy (taus scaled to [0,
0.25]). Seeded; no value-dependent sizes. 2 phases and the end."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2755)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


A, CAP, ENVS, BATCH, N, NP, K, EMB, NSTEP, GAMMA, KAPPA = 18, 150_000, 64, 256, 64, 64, 32, 64, 3, 0.99, 1.0


class IQN(nn.Module):
    def __init__(self):
        super().__init__()
        self.torso = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        self.phi = nn.Linear(EMB, 3136)
        self.fc = nn.Linear(3136, 512)
        self.out = nn.Linear(512, A)
        self.register_buffer("pis", math.pi * torch.arange(EMB, dtype=torch.float32))

    def forward(self, frames, taus):  # frames (B, 4, 84, 84) uint8, taus (n, B) -> (n, B, A)
        n, b = taus.shape
        state = self.torso(frames.float() / 255.0)  # (B, 3136)
        state_tiled = state.repeat(n, 1)  # (n * B, 3136)
        cos = torch.cos(taus.reshape(n * b, 1) * self.pis[None])  # (n * B, 64)
        x = state_tiled * F.relu(self.phi(cos))
        x = F.relu(self.fc(x))
        return self.out(x).view(n, b, A)


online, target = IQN().to(dev), IQN().to(dev)
target.load_state_dict(online.state_dict())
opt = torch.optim.Adam(online.parameters(), lr=5e-5, eps=3.125e-4)
g = torch.Generator(device=dev).manual_seed(2755)
frames = torch.randint(0, 256, (CAP, 84, 84), dtype=torch.uint8, device=dev, generator=g)
actions = torch.randint(0, A, (CAP,), device=dev, generator=g)
rewards = torch.randn(CAP, device=dev, generator=g).clamp(-1, 1)
dones = torch.rand(CAP, device=dev, generator=g) < 0.01
ptr = 0
print(sum(p.numel() for p in online.parameters()), "parameters")
report("iqn_online_target_and_gpu_replay_150000_frames")

stack = torch.arange(-3, 1, device=dev)


def stacked(idx):
    return frames[(idx[:, None] + stack) % CAP]


def act(states, eps=0.01):
    with torch.no_grad():
        taus = torch.rand(K, states.shape[0], device=dev, generator=g)
        q = online(states, taus).mean(0)
        greedy = q.argmax(-1)
    rand = torch.randint(0, A, greedy.shape, device=dev, generator=g)
    return torch.where(torch.rand(greedy.shape, device=dev, generator=g) < eps, rand, greedy)


def update():
    idx = torch.randint(3, CAP - NSTEP - 1, (BATCH,), device=dev, generator=g)
    s, s_next = stacked(idx), stacked(idx + NSTEP)
    a = actions[idx]
    disc = GAMMA ** torch.arange(NSTEP, device=dev, dtype=torch.float32)
    steps = idx[:, None] + torch.arange(NSTEP, device=dev)
    ret = (rewards[steps] * disc).sum(1)
    done = dones[steps].any(1).float()
    with torch.no_grad():
        taus_k = torch.rand(K, BATCH, device=dev, generator=g)
        next_a = online(s_next, taus_k).mean(0).argmax(-1)  # double DQN
        taus_np = torch.rand(NP, BATCH, device=dev, generator=g)
        z_next = target(s_next, taus_np)  # (N', B, A)
        z_next = z_next.gather(2, next_a[None, :, None].expand(NP, BATCH, 1)).squeeze(2).T  # (B, N')
        target_q = ret[:, None] + GAMMA**NSTEP * (1 - done[:, None]) * z_next
    taus = torch.rand(N, BATCH, device=dev, generator=g)
    z = online(s, taus)  # (N, B, A)
    z = z.gather(2, a[None, :, None].expand(N, BATCH, 1)).squeeze(2).T  # (B, N)
    td = target_q[:, None, :] - z[:, :, None]  # (B, N, N')
    huber = torch.where(td.abs() <= KAPPA, 0.5 * td**2, KAPPA * (td.abs() - 0.5 * KAPPA))
    weight = torch.abs(taus.T[:, :, None] - (td.detach() < 0).float())
    loss = (weight * huber / KAPPA).sum(1).mean(1).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


env_idx = torch.randint(3, CAP, (ENVS,), device=dev, generator=g)
for it in range(16):
    a_env = act(stacked(env_idx))
    new = torch.randint(0, 256, (ENVS, 84, 84), dtype=torch.uint8, device=dev, generator=g)
    slots = (ptr + torch.arange(ENVS, device=dev)) % CAP
    frames[slots] = new
    actions[slots] = a_env
    ptr = (ptr + ENVS) % CAP
    env_idx = slots
    loss = update()
    if it % 4 == 3:
        target.load_state_dict(online.state_dict())
    print(it, round(loss.item(), 5))
report("16_act_and_update_iterations_batch_256_n64_np64")

with torch.inference_mode():
    idx = torch.randint(3, CAP, (512,), device=dev, generator=g)
    s = stacked(idx)
    taus = torch.rand(K, 512, device=dev, generator=g)
    greedy = online(s, taus).mean(0).argmax(-1)
    cvar = online(s, 0.25 * taus).mean(0).argmax(-1)
    print("agree", round((greedy == cvar).float().mean().item(), 4))
report("inference_mode_neutral_and_cvar_policies_512_states")
print("done")
