"""Double DQN with prioritized experience replay, all on the GPU: the Nature-DQN CNN (8x8/4, 4x4/2,
3x3/1 convolutions, 512 hidden, 18 actions) on stacks of 4 84 x 84 uint8 frames, an online and a
target network (deepcopy, hard update every 2 steps), a replay buffer of 12,000 transitions held as
uint8 tensors, proportional sampling by torch.multinomial over priorities^0.6 with importance
weights (beta 0.4), Huber TD errors of the online net's greedy actions valued by the target net,
priorities written back with index_put, Adam (eps 1.5e-4) with gradient clipping, batch 256, fp32,
3 updates, then epsilon-greedy acting for 512 parallel environments (torch.rand on the GPU);
4 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10703)
CAP, B, NENV, A = (300, 16, 8, 18) if SMALL else (12000, 256, 512, 18)
device = "cuda" if torch.cuda.is_available() else "cpu"


class NatureDQN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(4, 32, 8, 4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, 2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, 1),
            nn.ReLU(),
        )
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, A))

    def forward(self, obs):
        return self.fc(self.conv(obs.float() / 255.0))


online = NatureDQN().to(device)
target = copy.deepcopy(online)
target.requires_grad_(False)
optimizer = torch.optim.Adam(online.parameters(), lr=6.25e-5, eps=1.5e-4)
obs_buf = torch.randint(0, 256, (CAP, 4, 84, 84), dtype=torch.uint8, device=device)
next_buf = torch.randint(0, 256, (CAP, 4, 84, 84), dtype=torch.uint8, device=device)
act_buf = torch.randint(0, A, (CAP,), device=device)
rew_buf = torch.randn(CAP, device=device).clamp_(-1, 1)
done_buf = torch.rand(CAP, device=device) < 0.02
priorities = torch.ones(CAP, device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
gamma, alpha, beta = 0.99, 0.6, 0.4
for step in range(3):
    probs = priorities.pow(alpha)
    probs /= probs.sum()
    idx = torch.multinomial(probs, B, replacement=True)
    weights = (CAP * probs[idx]).pow(-beta)
    weights /= weights.max()
    obs, nxt = obs_buf[idx], next_buf[idx]
    q = online(obs).gather(1, act_buf[idx, None]).squeeze(1)
    with torch.no_grad():
        best = online(nxt).argmax(1, keepdim=True)
        q_next = target(nxt).gather(1, best).squeeze(1)
        y = rew_buf[idx] + gamma * (~done_buf[idx]).float() * q_next
    td = F.smooth_l1_loss(q, y, reduction="none")
    loss = (weights * td).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(online.parameters(), 10.0)
    optimizer.step()
    priorities.index_put_((idx,), (q - y).detach().abs() + 1e-6)
    if step % 2 == 1:
        target.load_state_dict(online.state_dict())
    if device == "cuda":
        print(
            f"update {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del probs, idx, weights, obs, nxt, q, best, q_next, y, td, loss
with torch.no_grad():
    frames = torch.randint(0, 256, (NENV, 4, 84, 84), dtype=torch.uint8, device=device)
    greedy = online(frames).argmax(1)
    explore = torch.rand(NENV, device=device) < 0.05
    actions = torch.where(explore, torch.randint(0, A, (NENV,), device=device), greedy)
if device == "cuda":
    print(
        f"act {tuple(actions.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
