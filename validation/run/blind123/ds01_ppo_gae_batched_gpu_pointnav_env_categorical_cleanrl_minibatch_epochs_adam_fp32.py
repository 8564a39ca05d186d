"""PPO as CleanRL's ppo.py writes it, with the environment itself kept on the GPU: 16,384 copies of a
batched point-mass navigation task (positions, velocities, goals and 8 obstacles as tensors, stepped
with torch ops, auto-reset through torch.where), separate actor and critic MLPs of 3 tanh layers of
256 (orthogonal init, built on the host and moved), a categorical policy over 9 actions, 64-step
rollouts into preallocated GPU storage under no_grad, GAE (lambda 0.95) by a reversed loop,
minibatches indexed by a shuffled numpy array, per-minibatch advantage normalisation, clipped
surrogate, clipped value loss, entropy bonus, approx-KL; fp32, Adam eps 1e-5 with the lr annealed,
grad clip 0.5; 2 updates of 4 epochs x 4 minibatches, then a greedy evaluation under inference_mode;
6 phases."""

import os

import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12301)
np.random.seed(12301)
N_ENVS = 64 if SMALL else 16384
T = 16 if SMALL else 64
N_OBST = 8
OBS = 6 + 2 * N_OBST
N_ACT = 9
HID = 64 if SMALL else 256
EPOCHS, N_MB, UPDATES = 4, 4, 2
GAMMA, LAM, CLIP, ENT, VF = 0.99, 0.95, 0.2, 0.01, 0.5
LR = 2.5e-4
device = "cuda" if torch.cuda.is_available() else "cpu"


class PointNav:
    def __init__(self, n):
        self.n = n
        self.pos = torch.zeros(n, 2, device=device)
        self.vel = torch.zeros(n, 2, device=device)
        self.goal = torch.zeros(n, 2, device=device)
        self.obst = torch.zeros(n, N_OBST, 2, device=device)
        self.t = torch.zeros(n, dtype=torch.long, device=device)
        moves = [[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1], [1, 1], [1, -1], [-1, 1], [-1, -1]]
        self.dirs = torch.tensor(moves, dtype=torch.float32, device=device) * 0.02
        self.reset_where(torch.ones(n, dtype=torch.bool, device=device))

    def reset_where(self, done):
        m = done[:, None]
        self.pos = torch.where(m, torch.rand(self.n, 2, device=device) * 2 - 1, self.pos)
        self.vel = torch.where(m, torch.zeros_like(self.vel), self.vel)
        self.goal = torch.where(m, torch.rand(self.n, 2, device=device) * 2 - 1, self.goal)
        new_obst = torch.rand(self.n, N_OBST, 2, device=device) * 2 - 1
        self.obst = torch.where(m[:, :, None], new_obst, self.obst)
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)

    def obs(self):
        rel = (self.obst - self.pos[:, None]).flatten(1)
        return torch.cat([self.pos, self.vel, self.goal - self.pos, rel], 1)

    def step(self, action):
        self.vel = 0.9 * self.vel + self.dirs[action]
        self.pos = (self.pos + self.vel).clamp(-1, 1)
        d_goal = (self.goal - self.pos).norm(dim=1)
        d_obst = (self.obst - self.pos[:, None]).norm(dim=2).min(1).values
        hit = d_obst < 0.05
        reached = d_goal < 0.1
        self.t += 1
        reward = -0.1 * d_goal - hit.float() + 10.0 * reached.float()
        done = reached | hit | (self.t >= 200)
        self.reset_where(done)
        return self.obs(), reward, done


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(OBS, HID)), nn.Tanh(),
            layer_init(nn.Linear(HID, HID)), nn.Tanh(),
            layer_init(nn.Linear(HID, HID)), nn.Tanh(),
            layer_init(nn.Linear(HID, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(OBS, HID)), nn.Tanh(),
            layer_init(nn.Linear(HID, HID)), nn.Tanh(),
            layer_init(nn.Linear(HID, HID)), nn.Tanh(),
            layer_init(nn.Linear(HID, N_ACT), std=0.01),
        )

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


env = PointNav(N_ENVS)
agent = Agent().to(device)
optimizer = torch.optim.Adam(agent.parameters(), lr=LR, eps=1e-5)

obs = torch.zeros((T, N_ENVS, OBS), device=device)
actions = torch.zeros((T, N_ENVS), dtype=torch.long, device=device)
logprobs = torch.zeros((T, N_ENVS), device=device)
rewards = torch.zeros((T, N_ENVS), device=device)
dones = torch.zeros((T, N_ENVS), device=device)
values = torch.zeros((T, N_ENVS), device=device)
batch_size = N_ENVS * T
mb_size = batch_size // N_MB

next_obs = env.obs()
next_done = torch.zeros(N_ENVS, device=device)
if device == "cuda":
    print(f"setup {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for update in range(UPDATES):
    optimizer.param_groups[0]["lr"] = (1.0 - update / UPDATES) * LR
    for step in range(T):
        obs[step] = next_obs
        dones[step] = next_done
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step] = value.flatten()
        actions[step] = action
        logprobs[step] = logprob
        next_obs, reward, done = env.step(action)
        rewards[step] = reward
        next_done = done.float()
    with torch.no_grad():
        next_value = agent.get_value(next_obs).reshape(1, -1)
        advantages = torch.zeros_like(rewards)
        lastgaelam = 0
        for t in reversed(range(T)):
            if t == T - 1:
                nextnonterminal = 1.0 - next_done
                nextvalues = next_value
            else:
                nextnonterminal = 1.0 - dones[t + 1]
                nextvalues = values[t + 1]
            delta = rewards[t] + GAMMA * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = delta + GAMMA * LAM * nextnonterminal * lastgaelam
        returns = advantages + values
    if device == "cuda":
        print(
            f"rollout {update} reward {rewards.mean().item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

    b_obs = obs.reshape((-1, OBS))
    b_logprobs = logprobs.reshape(-1)
    b_actions = actions.reshape(-1)
    b_advantages = advantages.reshape(-1)
    b_returns = returns.reshape(-1)
    b_values = values.reshape(-1)
    b_inds = np.arange(batch_size)
    clipfracs = []
    for epoch in range(EPOCHS):
        np.random.shuffle(b_inds)
        for start in range(0, batch_size, mb_size):
            mb_inds = b_inds[start : start + mb_size]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                b_obs[mb_inds], b_actions[mb_inds]
            )
            logratio = newlogprob - b_logprobs[mb_inds]
            ratio = logratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - logratio).mean()
                clipfracs += [((ratio - 1.0).abs() > CLIP).float().mean().item()]
            mb_adv = b_advantages[mb_inds]
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg_loss1 = -mb_adv * ratio
            pg_loss2 = -mb_adv * torch.clamp(ratio, 1 - CLIP, 1 + CLIP)
            pg_loss = torch.max(pg_loss1, pg_loss2).mean()
            newvalue = newvalue.view(-1)
            v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
            v_clipped = b_values[mb_inds] + torch.clamp(newvalue - b_values[mb_inds], -CLIP, CLIP)
            v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
            v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
            entropy_loss = entropy.mean()
            loss = pg_loss - ENT * entropy_loss + v_loss * VF
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            optimizer.step()
    if device == "cuda":
        print(
            f"update {update} kl {approx_kl.item():.5f} clipfrac {np.mean(clipfracs):.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    total = torch.zeros(N_ENVS, device=device)
    o = env.obs()
    for _ in range(T // 2):
        a = agent.actor(o).argmax(-1)
        o, r, _ = env.step(a)
        total += r
if device == "cuda":
    print(
        f"eval return {total.mean().item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
