"""Evolution Strategies as a scalable alternative to RL (Salimans et al. 2017), written by hand for the
whole population on one GPU. The policy is an MLP 3 -> 256 -> 256 -> 1 (tanh, times the torque limit 2)
whose parameters live as one flat vector mu (`torch.nn.utils.parameters_to_vector`); each member's
parameters are a view-split of its row of the (population, n_params) matrix, and the population acts at
once through `torch.func.vmap` over `torch.func.functional_call`. The environment is gym's Pendulum-v1
(g = 10, dt = 0.05, torque clipped to 2, speed to 8, cost th^2 + 0.1 thdot^2 + 0.001 u^2), batched as
(population, 4 episodes) states and stepped 200 times under no_grad. Antithetic sampling (eps and -eps),
centered-rank fitness shaping (ranks scattered from `argsort`), the gradient estimate
eps^T (F+ - F-) / (n sigma) set as `mu.grad` (negated) with L2 decay 0.005, Adam lr 0.02 on mu, sigma 0.05.
Phase 1: 8 generations of population 2,048 with fresh `torch.randn` perturbations.
Phase 2: 6 generations with the paper's shared noise table: 32M normals drawn once on the GPU, each
member's perturbation the slice at a random offset, gathered as `table.unfold(0, n_params, 1)[offsets]`.
Phase 3: the mean policy evaluated under `torch.inference_mode` on 4,096 episodes.
3 phases."""

import torch
from torch import nn
from torch.func import functional_call, vmap

torch.manual_seed(2944)
dev = "cuda"
POP, EPISODES, HORIZON, SIGMA = 2048, 4, 200, 0.05


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


policy = nn.Sequential(nn.Linear(3, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1)).to(
    dev
)
names = [n for n, _ in policy.named_parameters()]
shapes = [p.shape for _, p in policy.named_parameters()]
sizes = [p.numel() for _, p in policy.named_parameters()]
mu = nn.Parameter(torch.nn.utils.parameters_to_vector(policy.parameters()).detach().clone())
N_PARAMS = mu.numel()
opt = torch.optim.Adam([mu], lr=0.02)
print("policy parameters", N_PARAMS)


def unflatten(flat):
    # flat (pop, n_params) -> dict of batched parameters
    pieces = flat.split(sizes, dim=1)
    return {n: t.view(flat.shape[0], *s) for n, t, s in zip(names, pieces, shapes, strict=True)}


def act_one(params, obs):
    return 2.0 * torch.tanh(functional_call(policy, params, (obs,)))


act_population = vmap(act_one)


def rollout(flat, episodes):
    pop = flat.shape[0]
    params = unflatten(flat)
    th = (torch.rand(pop, episodes, device=dev) * 2 - 1) * torch.pi
    thdot = torch.rand(pop, episodes, device=dev) * 2 - 1
    ret = torch.zeros(pop, episodes, device=dev)
    for _ in range(HORIZON):
        obs = torch.stack([torch.cos(th), torch.sin(th), thdot], -1)
        u = act_population(params, obs).squeeze(-1).clamp(-2.0, 2.0)
        ang = (th + torch.pi) % (2 * torch.pi) - torch.pi
        ret -= ang**2 + 0.1 * thdot**2 + 0.001 * u**2
        thdot = (thdot + (3 * 10.0 / 2 * torch.sin(th) + 3.0 * u) * 0.05).clamp(-8.0, 8.0)
        th = th + thdot * 0.05
    return ret.mean(1)


def centered_ranks(x):
    ranks = torch.empty_like(x)
    ranks[x.argsort()] = torch.arange(x.numel(), device=dev, dtype=x.dtype)
    return ranks / (x.numel() - 1) - 0.5


def es_step(eps):
    half = eps.shape[0]
    with torch.no_grad():
        members = mu.detach() + SIGMA * torch.cat([eps, -eps])
        fit = rollout(members, EPISODES)
        shaped = centered_ranks(fit)
        grad = eps.T @ (shaped[:half] - shaped[half:]) / (half * SIGMA)
    mu.grad = -(grad - 0.005 * mu.detach())
    opt.step()
    opt.zero_grad(set_to_none=True)
    return fit


for gen in range(8):
    eps = torch.randn(POP // 2, N_PARAMS, device=dev)
    fit = es_step(eps)
    print(f"gen {gen}: mean return {fit.mean().item():.1f} best {fit.max().item():.1f}")
report("es_8_generations_population_2048_fresh_noise")

del eps, fit
table = torch.randn(32_000_000, device=dev)
windows = table.unfold(0, N_PARAMS, 1)
for gen in range(6):
    offsets = torch.randint(0, windows.shape[0], (POP // 2,), device=dev)
    eps = windows[offsets]
    fit = es_step(eps)
    print(f"table gen {gen}: mean return {fit.mean().item():.1f}")
report("es_6_generations_shared_noise_table_unfold")

del eps, fit, windows, table
with torch.inference_mode():
    ret = rollout(mu.detach()[None], 4096)
print("mean policy return", round(ret.item(), 1))
report("inference_mode_eval_mean_policy_4096_episodes")
