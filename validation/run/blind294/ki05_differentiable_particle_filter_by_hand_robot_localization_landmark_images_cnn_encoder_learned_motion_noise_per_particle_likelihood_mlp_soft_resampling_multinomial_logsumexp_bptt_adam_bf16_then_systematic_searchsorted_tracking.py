"""Differentiable particle filter (Jonschkowski, Rastogi and Brock 2018, "Differentiable Particle Filters:
End-to-End Learning with Algorithmic Priors"), with the soft resampling of Karkus et al. 2018 ("Particle
Filter Networks"), written by hand for global localisation of a robot in a 10 m x 10 m room with 32
landmarks. Trajectories are simulated on the GPU (unicycle model, noisy odometry actions, walls clamp);
each observation is a 24 x 24 egocentric image: Gaussian blobs of the landmarks within 3 m rendered in
the robot's frame plus pixel noise. The model: a CNN encoder (3 conv layers, stride 2, to 128 features)
of the observation; a learned motion model (MLP on [odometry, N(0, 1) noise] per particle to a pose
delta, applied in the particle's frame); an observation likelihood (MLP on [encoding, x, y, cos, sin]
for every particle, a log-likelihood added to the log-weights, normalised with `logsumexp`); soft
resampling every step (q = 0.5 w + 0.5 / P, `torch.multinomial(q, P, replacement=True)`, `gather` of
particles, new log-weights log w - log q). Loss: the negative log of the Gaussian mixture (sigma 0.5 m
on position, 0.3 rad on heading) of the weighted particles at the true pose, averaged over time,
back-propagated through all 20 steps; Adam lr 3e-4.
Phase 1: 8 training iterations, 24 trajectories x 20 steps x 1,000 particles, fp32.
Phase 2: 6 iterations at 2,000 particles under bf16 autocast.
Phase 3: no_grad tracking of 128 trajectories x 60 steps x 1,000 particles with systematic resampling
(`torch.searchsorted` of stratified positions in the weights' `cumsum`), position RMSE of the mean.
3 phases."""

import math

import torch
from torch import nn

torch.manual_seed(2945)
dev = "cuda"
ROOM, N_LM, IMG, T = 10.0, 32, 24, 20
landmarks = torch.rand(N_LM, 2, device=dev) * ROOM


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def simulate(b, steps):
    pose = torch.cat([torch.rand(b, 2, device=dev) * ROOM, torch.rand(b, 1, device=dev) * 2 * math.pi], -1)
    poses, acts = [], []
    for _ in range(steps):
        v = 0.3 + 0.2 * torch.rand(b, device=dev)
        w = 0.4 * torch.randn(b, device=dev)
        x = (pose[:, 0] + v * torch.cos(pose[:, 2])).clamp(0, ROOM)
        y = (pose[:, 1] + v * torch.sin(pose[:, 2])).clamp(0, ROOM)
        pose = torch.stack([x, y, (pose[:, 2] + w) % (2 * math.pi)], -1)
        odo = torch.stack([v, w], -1) + 0.05 * torch.randn(b, 2, device=dev)
        poses.append(pose)
        acts.append(odo)
    return torch.stack(poses, 1), torch.stack(acts, 1)  # (B, T, 3), (B, T, 2)


lin = torch.linspace(-3, 3, IMG, device=dev)
pix = torch.stack(torch.meshgrid(lin, lin, indexing="ij"), -1).view(-1, 2)  # (IMG*IMG, 2)


def render(poses):
    b, t = poses.shape[:2]
    rel = landmarks.view(1, 1, N_LM, 2) - poses[..., None, :2]
    c, s = torch.cos(poses[..., 2:3]), torch.sin(poses[..., 2:3])
    local = torch.stack([c * rel[..., 0] + s * rel[..., 1], -s * rel[..., 0] + c * rel[..., 1]], -1)
    d2 = ((pix.view(1, 1, -1, 1, 2) - local[:, :, None]) ** 2).sum(-1)  # (B, T, IMG*IMG, N_LM)
    img = torch.exp(-d2 / 0.08).sum(-1).view(b, t, 1, IMG, IMG)
    return img + 0.1 * torch.randn_like(img)


class DPF(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 32, 3, 2, 1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
            nn.Conv2d(64, 64, 3, 2, 1), nn.ReLU(),
            nn.Flatten(), nn.Linear(64 * 3 * 3, 128),
        )  # fmt: skip
        self.motion = nn.Sequential(
            nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3)
        )
        self.likelihood = nn.Sequential(
            nn.Linear(128 + 4, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)
        )

    def move(self, particles, odo):
        b, p, _ = particles.shape
        inp = torch.cat([odo[:, None].expand(b, p, 2), torch.randn(b, p, 2, device=dev)], -1)
        delta = self.motion(inp)
        c, s = torch.cos(particles[..., 2]), torch.sin(particles[..., 2])
        x = particles[..., 0] + c * delta[..., 0] - s * delta[..., 1]
        y = particles[..., 1] + s * delta[..., 0] + c * delta[..., 1]
        return torch.stack([x.clamp(0, ROOM), y.clamp(0, ROOM), particles[..., 2] + delta[..., 2]], -1)

    def log_likelihood(self, enc, particles):
        b, p, _ = particles.shape
        feats = torch.cat(
            [particles[..., :2] / ROOM, torch.cos(particles[..., 2:]), torch.sin(particles[..., 2:])], -1
        )
        return self.likelihood(torch.cat([enc[:, None].expand(b, p, 128), feats], -1)).squeeze(-1)


def soft_resample(particles, logw, alpha=0.5):
    b, p, _ = particles.shape
    w = logw.exp()
    q = alpha * w + (1 - alpha) / p
    idx = torch.multinomial(q, p, replacement=True)
    particles = particles.gather(1, idx[..., None].expand(b, p, 3))
    logw = (logw - q.log()).gather(1, idx)
    return particles, logw - torch.logsumexp(logw, 1, keepdim=True)


def mixture_nll(particles, logw, pose):
    dxy = ((particles[..., :2] - pose[:, None, :2]) ** 2).sum(-1) / (2 * 0.5**2)
    dth = (1 - torch.cos(particles[..., 2] - pose[:, None, 2])) / 0.3**2
    comp = -dxy - dth - math.log(2 * math.pi * 0.5**2)
    return -torch.logsumexp(logw + comp, 1).mean()


def uniform_particles(b, p):
    xy = torch.rand(b, p, 2, device=dev) * ROOM
    return torch.cat([xy, torch.rand(b, p, 1, device=dev) * 2 * math.pi], -1)


def filter_loss(b, n_particles):
    poses, odo = simulate(b, T)
    obs = render(poses)
    enc = model.encoder(obs.flatten(0, 1)).view(b, T, 128)
    particles = uniform_particles(b, n_particles)
    logw = torch.full((b, n_particles), -math.log(n_particles), device=dev)
    loss = 0.0
    for t in range(T):
        particles = model.move(particles, odo[:, t])
        logw = logw + model.log_likelihood(enc[:, t], particles).float()
        logw = logw - torch.logsumexp(logw, 1, keepdim=True)
        loss = loss + mixture_nll(particles.float(), logw, poses[:, t]) / T
        particles, logw = soft_resample(particles.float(), logw)
    return loss


model = DPF().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=3e-4)
print("parameters", sum(p.numel() for p in model.parameters()))
for _ in range(8):
    loss = filter_loss(24, 1000)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("train nll", round(loss.item(), 4))
report("train_dpf_24_traj_20_steps_1000_particles_fp32")

for _ in range(6):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = filter_loss(24, 2000)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("bf16 train nll", round(loss.item(), 4))
report("train_dpf_2000_particles_bf16_autocast")

del loss
model.eval()
with torch.no_grad():
    b, p, steps = 128, 1000, 60
    poses, odo = simulate(b, steps)
    particles = uniform_particles(b, p)
    logw = torch.full((b, p), -math.log(p), device=dev)
    err = torch.zeros(steps, device=dev)
    for t in range(steps):
        enc = model.encoder(render(poses[:, t : t + 1]).flatten(0, 1))
        particles = model.move(particles, odo[:, t])
        logw = logw + model.log_likelihood(enc, particles)
        logw = logw - torch.logsumexp(logw, 1, keepdim=True)
        w = logw.exp()
        mean_xy = (w[..., None] * particles[..., :2]).sum(1)
        err[t] = ((mean_xy - poses[:, t, :2]) ** 2).sum(-1).mean().sqrt()
        cdf = w.cumsum(1)
        cdf[:, -1] = 1.0
        positions = (torch.arange(p, device=dev) + torch.rand(b, 1, device=dev)) / p
        idx = torch.searchsorted(cdf, positions).clamp_max(p - 1)
        particles = particles.gather(1, idx[..., None].expand(b, p, 3))
        logw = torch.full((b, p), -math.log(p), device=dev)
print("tracking rmse first/last", round(err[0].item(), 3), round(err[-1].item(), 3))
report("no_grad_tracking_128_traj_60_steps_systematic_resampling")
