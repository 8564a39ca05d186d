"""QR-DQN (Dabney et al. 2018, "Distributional Reinforcement Learning with Quantile Regression") written
by hand against a CartPole whose physics runs on the GPU: gym's CartPole-v1 equations (Barto et al. 1983
constants, Euler step of 0.02 s, termination at 12 degrees or 2.4 m, 500-step truncation) stepped for 4,096
environments at once, finished ones reset in place with `torch.where`. Transitions go into a ring replay
buffer preallocated on the GPU (262,144 slots of obs / action / reward / next obs / done), written with
`index_copy_` at `(ptr + arange(n)) % capacity`. The network is an MLP 4 -> 512 -> 512 -> 2 x 200 quantiles;
the quantile Huber loss builds the pairwise (batch, 200, 200) TD errors between the target quantiles of
the greedy next action (mean over quantiles of the target net) and the online quantiles of the taken
action, weighs the Huber term by |tau_hat - 1{u < 0}|, sums over online quantiles and averages over target
ones, as the paper's Algorithm 1 does. Adam lr 5e-5, eps 0.01/32 (the paper's); target network a deepcopy
refreshed with `load_state_dict` every 100 updates; epsilon decays linearly 1 -> 0.05.
Phase 1: 40 steps of random actions fill the buffer (163,840 transitions).
Phase 2: 300 iterations of one epsilon-greedy environment step (online net under no_grad) and one
gradient step on a batch of 2,048 sampled with `torch.randint`.
Phase 3: greedy evaluation: 500 steps of all 4,096 environments, episode returns accumulated on the GPU.
3 phases."""

import copy

import torch
from torch import nn

torch.manual_seed(2941)
dev = "cuda"
N_ENVS, CAP, N_Q, BATCH, GAMMA = 4096, 262144, 200, 2048, 0.99


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class VecCartPole:
    """gym CartPole-v1, batched: x, x_dot, theta, theta_dot per environment."""

    g, mc, mp, half_len, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02

    def __init__(self, n):
        self.n = n
        self.state = (torch.rand(n, 4, device=dev) - 0.5) * 0.1
        self.t = torch.zeros(n, dtype=torch.long, device=dev)

    def step(self, action):
        x, x_dot, th, th_dot = self.state.unbind(1)
        force = torch.where(action == 1, self.force_mag, -self.force_mag)
        cos, sin = torch.cos(th), torch.sin(th)
        total, pml = self.mc + self.mp, self.mp * self.half_len
        temp = (force + pml * th_dot**2 * sin) / total
        th_acc = (self.g * sin - cos * temp) / (self.half_len * (4.0 / 3.0 - self.mp * cos**2 / total))
        x_acc = temp - pml * th_acc * cos / total
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * x_acc
        th = th + self.tau * th_dot
        th_dot = th_dot + self.tau * th_acc
        nxt = torch.stack([x, x_dot, th, th_dot], 1)
        self.t += 1
        terminated = (x.abs() > 2.4) | (th.abs() > 12 * 2 * torch.pi / 360)
        truncated = self.t >= 500
        done = terminated | truncated
        reward = torch.ones(self.n, device=dev)
        fresh = (torch.rand(self.n, 4, device=dev) - 0.5) * 0.1
        self.state = torch.where(done[:, None], fresh, nxt)
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        return nxt, reward, terminated.float(), done


class Replay:
    def __init__(self, cap):
        self.cap, self.ptr, self.size = cap, 0, 0
        self.obs = torch.zeros(cap, 4, device=dev)
        self.next_obs = torch.zeros(cap, 4, device=dev)
        self.act = torch.zeros(cap, dtype=torch.long, device=dev)
        self.rew = torch.zeros(cap, device=dev)
        self.term = torch.zeros(cap, device=dev)

    def add(self, obs, act, rew, next_obs, term):
        idx = (self.ptr + torch.arange(obs.shape[0], device=dev)) % self.cap
        self.obs.index_copy_(0, idx, obs)
        self.act.index_copy_(0, idx, act)
        self.rew.index_copy_(0, idx, rew)
        self.next_obs.index_copy_(0, idx, next_obs)
        self.term.index_copy_(0, idx, term)
        self.ptr = (self.ptr + obs.shape[0]) % self.cap
        self.size = min(self.size + obs.shape[0], self.cap)

    def sample(self, b):
        i = torch.randint(0, self.size, (b,), device=dev)
        return self.obs[i], self.act[i], self.rew[i], self.next_obs[i], self.term[i]


class QRNet(nn.Module):
    def __init__(self, n_actions=2, n_q=N_Q, hidden=512):
        super().__init__()
        self.n_actions, self.n_q = n_actions, n_q
        self.body = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, n_actions * n_q)

    def forward(self, obs):
        return self.head(self.body(obs)).view(-1, self.n_actions, self.n_q)


def quantile_huber_loss(theta, target, kappa=1.0):
    # theta (B, N) online quantiles, target (B, N') target samples
    tau_hat = (torch.arange(N_Q, device=dev, dtype=torch.float32) + 0.5) / N_Q
    u = target[:, None, :] - theta[:, :, None]  # (B, N, N')
    huber = torch.where(u.abs() <= kappa, 0.5 * u.pow(2), kappa * (u.abs() - 0.5 * kappa))
    weight = (tau_hat[None, :, None] - (u.detach() < 0).float()).abs()
    return (weight * huber / kappa).mean(2).sum(1).mean()


env, buf = VecCartPole(N_ENVS), Replay(CAP)
online = QRNet().to(dev)
target_net = copy.deepcopy(online)
opt = torch.optim.Adam(online.parameters(), lr=5e-5, eps=0.01 / 32)
obs = env.state.clone()
for _ in range(40):
    act = torch.randint(0, 2, (N_ENVS,), device=dev)
    nxt, rew, term, done = env.step(act)
    buf.add(obs, act, rew, nxt, term)
    obs = env.state.clone()
print("buffer", buf.size)
report("random_fill_40_steps_4096_envs")

ITERS = 300
for it in range(ITERS):
    eps = max(0.05, 1.0 - it / (0.8 * ITERS))
    with torch.no_grad():
        greedy = online(obs).mean(2).argmax(1)
    explore = torch.rand(N_ENVS, device=dev) < eps
    act = torch.where(explore, torch.randint(0, 2, (N_ENVS,), device=dev), greedy)
    nxt, rew, term, done = env.step(act)
    buf.add(obs, act, rew, nxt, term)
    obs = env.state.clone()

    o, a, r, o2, d = buf.sample(BATCH)
    with torch.no_grad():
        q_next = target_net(o2)  # (B, A, N)
        a_star = q_next.mean(2).argmax(1)
        z_next = q_next.gather(1, a_star[:, None, None].expand(-1, 1, N_Q)).squeeze(1)
        target = r[:, None] + GAMMA * (1 - d[:, None]) * z_next
    theta = online(o).gather(1, a[:, None, None].expand(-1, 1, N_Q)).squeeze(1)
    loss = quantile_huber_loss(theta, target)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if (it + 1) % 100 == 0:
        target_net.load_state_dict(online.state_dict())
        print(f"iter {it + 1}: loss {loss.item():.4f} eps {eps:.2f}")
report("qr_dqn_300_updates_batch_2048_pairwise_quantile_huber")

del o, a, r, o2, d, theta, target, loss, q_next, z_next
online.eval()
returns = torch.zeros(N_ENVS, device=dev)
alive = torch.ones(N_ENVS, dtype=torch.bool, device=dev)
env = VecCartPole(N_ENVS)
with torch.no_grad():
    for _ in range(500):
        act = online(env.state).mean(2).argmax(1)
        _, rew, _, done = env.step(act)
        returns += rew * alive.float()
        alive &= ~done
print("greedy mean return", round(returns.mean().item(), 2))
report("greedy_eval_500_steps_4096_envs")
