"""Evolution strategies as in OpenAI's `evolution-strategies-starter` (Salimans et al. 2017), moved onto
one GPU in plain PyTorch: a *shared noise table* of 250,000,000 float32 Gaussians drawn once (the
starter's `SharedNoiseTable`, 1 GB), each perturbation a slice of it at an offset drawn by a seeded
NumPy RandomState (`noise[i : i + dim]`, stacked into a (256, dim) matrix); mirrored (antithetic)
sampling, the population theta +/- sigma * eps as a (512, dim) matrix split into per-parameter views
and evaluated all at once by `torch.func.vmap` over `torch.func.functional_call` of a tanh MLP policy
(6 -> 1,024 -> 1,024 -> 2, 1,058,818 parameters), in a batched point-mass reaching environment written
as tensors (8 episodes per member, 100 steps, positions, velocities, targets, reward minus distance
and action cost). Fitness shaping by centered ranks (argsort, scatter of arange), the gradient estimate
as the rank differences of the pairs times the noise matrix over (population * sigma), handed to
`torch.optim.Adam` (L2 0.005) as the .grad of the flat parameter vector theta. fp32. Phase 1: 4
generations. Phase 2: the mean policy (theta loaded into the module by `vector_to_parameters` under
no_grad) evaluated on 4,096 episodes of 200 steps under inference_mode. Seeded, fixed sizes.
2 phases + end."""

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn.utils import parameters_to_vector, vector_to_parameters

torch.manual_seed(2795)
dev = "cuda"
TABLE, HALF, EPISODES, STEPS, SIGMA = 250_000_000, 256, 8, 100, 0.02


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class SharedNoiseTable:
    def __init__(self, count, seed):
        gen = torch.Generator(device=dev)
        gen.manual_seed(seed)
        self.noise = torch.randn(count, device=dev, generator=gen)

    def get(self, i, dim):
        return self.noise[i : i + dim]

    def sample_index(self, stream, dim):
        return int(stream.randint(0, len(self.noise) - dim + 1))


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(6, 1024), nn.Tanh(), nn.Linear(1024, 1024), nn.Tanh(), nn.Linear(1024, 2)
        )

    def forward(self, obs):
        return torch.tanh(self.net(obs))


def rollout(act_fn, lead, episodes, steps, gen):
    # lead: the leading (population) shape; a batched point mass that must reach a random target
    shape = (*lead, episodes)
    pos = torch.rand(*shape, 2, device=dev, generator=gen) * 2 - 1
    vel = torch.zeros(*shape, 2, device=dev)
    target = torch.rand(*shape, 2, device=dev, generator=gen) * 2 - 1
    ret = torch.zeros(*shape, device=dev)
    for _ in range(steps):
        obs = torch.cat([pos, vel, target - pos], dim=-1)
        a = act_fn(obs)
        vel = 0.9 * vel + 0.05 * a
        pos = (pos + 0.1 * vel).clamp(-1.5, 1.5)
        ret = ret - (target - pos).norm(dim=-1) - 0.01 * (a * a).sum(-1)
    return ret.mean(-1)


def centered_ranks(x):
    ranks = torch.empty_like(x)
    ranks[x.argsort()] = torch.arange(x.numel(), device=x.device, dtype=x.dtype)
    return ranks / (x.numel() - 1) - 0.5


policy = Policy().to(dev)
names = [n for n, _ in policy.named_parameters()]
shapes = [p.shape for _, p in policy.named_parameters()]
sizes = [p.numel() for _, p in policy.named_parameters()]
theta = nn.Parameter(parameters_to_vector(policy.parameters()).detach().clone())
DIM = theta.numel()
print("dim", DIM)
opt = torch.optim.Adam([theta], lr=0.01, weight_decay=0.005)
noise = SharedNoiseTable(TABLE, seed=123)
stream = np.random.RandomState(2795)
gen = torch.Generator(device=dev)
gen.manual_seed(2795)


def population_act(flat):  # flat: (POP, DIM) -> per-member parameters as views
    params = {
        n: t.view(flat.shape[0], *s) for n, t, s in zip(names, flat.split(sizes, dim=1), shapes, strict=True)
    }

    def one(p, obs):
        return functional_call(policy, p, (obs,))

    return lambda obs: vmap(one)(params, obs)


report("setup")

for gen_i in range(4):
    with torch.no_grad():
        offsets = [noise.sample_index(stream, DIM) for _ in range(HALF)]
        eps = torch.stack([noise.get(i, DIM) for i in offsets])  # (HALF, DIM)
        pop = torch.cat([theta + SIGMA * eps, theta - SIGMA * eps])  # (2 * HALF, DIM)
        fitness = rollout(population_act(pop), (2 * HALF,), EPISODES, STEPS, gen)
        del pop
        ranks = centered_ranks(fitness)
        weights = ranks[:HALF] - ranks[HALF:]
        grad = weights @ eps / (2 * HALF * SIGMA)
    theta.grad = -grad
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"generation {gen_i} mean fitness {fitness.mean().item():.4f} max {fitness.max().item():.4f}")
    del eps, fitness, ranks, weights, grad
report("es")

with torch.no_grad():
    vector_to_parameters(theta.detach(), policy.parameters())
with torch.inference_mode():
    score = rollout(policy, (), 4096, 200, gen)
    print(f"eval return {score.item():.4f}")
report("eval")
print("done")
