"""MuZero for a 15x15 board game written from the paper's pseudocode: a representation network
(a 3x3 conv stem and 6 residual blocks of 128 channels with BatchNorm) over 17 history planes, a
dynamics network (the hidden state concatenated with a one-hot action plane, 6 residual blocks,
a conv reward head) and a prediction network (2 residual blocks, policy and value heads), hidden
states min-max normalised per sample, value and reward as categorical distributions over a support
of 601 with the invertible h(x) transform; replay of game positions kept on the GPU (bool planes),
prioritised sampling by torch.multinomial with importance weights, K=5 unrolled steps with
scale_gradient(0.5) on the hidden state and 1/K on each step's loss, priorities written back by
index_put; channels_last, fp16 autocast with GradScaler, SGD momentum 0.9 with weight decay; 3
training steps, then a batched search that expands 16 simulations for 512 roots with
recurrent_inference under no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12304)
N = 7 if SMALL else 15
A = N * N
PLANES = 17
CH = 32 if SMALL else 128
BLOCKS = 2 if SMALL else 6
SUPPORT = 300
K = 5
BATCH = 16 if SMALL else 1024
POSITIONS = 256 if SMALL else 50000
ROOTS, SIMS = (8, 4) if SMALL else (512, 16)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = dict(device_type="cuda", dtype=torch.float16, enabled=device == "cuda")


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


def normalize_hidden(h):
    flat = h.flatten(1)
    mn = flat.min(1, keepdim=True).values
    mx = flat.max(1, keepdim=True).values
    scale = (mx - mn).clamp(min=1e-5)
    return ((flat - mn) / scale).view_as(h)


class MuZeroNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(PLANES, CH, 3, padding=1, bias=False), nn.BatchNorm2d(CH), nn.ReLU())
        self.repr_blocks = nn.Sequential(*[ResBlock(CH) for _ in range(BLOCKS)])
        self.dyn_stem = nn.Sequential(nn.Conv2d(CH + 1, CH, 3, padding=1, bias=False), nn.BatchNorm2d(CH), nn.ReLU())
        self.dyn_blocks = nn.Sequential(*[ResBlock(CH) for _ in range(BLOCKS)])
        self.reward_conv = nn.Sequential(nn.Conv2d(CH, 1, 1), nn.BatchNorm2d(1), nn.ReLU())
        self.reward_fc = nn.Sequential(nn.Linear(A, 256), nn.ReLU(), nn.Linear(256, 2 * SUPPORT + 1))
        self.pred_blocks = nn.Sequential(*[ResBlock(CH) for _ in range(2)])
        self.policy_conv = nn.Sequential(nn.Conv2d(CH, 2, 1), nn.BatchNorm2d(2), nn.ReLU())
        self.policy_fc = nn.Linear(2 * A, A)
        self.value_conv = nn.Sequential(nn.Conv2d(CH, 1, 1), nn.BatchNorm2d(1), nn.ReLU())
        self.value_fc = nn.Sequential(nn.Linear(A, 256), nn.ReLU(), nn.Linear(256, 2 * SUPPORT + 1))

    def prediction(self, h):
        x = self.pred_blocks(h)
        return self.policy_fc(self.policy_conv(x).flatten(1)), self.value_fc(self.value_conv(x).flatten(1))

    def initial_inference(self, obs):
        h = normalize_hidden(self.repr_blocks(self.stem(obs)))
        policy, value = self.prediction(h)
        return h, policy, value

    def recurrent_inference(self, h, action):
        plane = F.one_hot(action, A).to(h.dtype).view(-1, 1, N, N)
        x = torch.cat([h, plane], 1).contiguous(memory_format=torch.channels_last)
        nh = self.dyn_blocks(self.dyn_stem(x))
        reward = self.reward_fc(self.reward_conv(nh).flatten(1))
        nh = normalize_hidden(nh)
        policy, value = self.prediction(nh)
        return nh, reward, policy, value


def scale_gradient(t, scale):
    return t * scale + t.detach() * (1 - scale)


SUPPORT_VALUES = torch.arange(-SUPPORT, SUPPORT + 1, device=device, dtype=torch.float32)


def h_transform(x, eps=1e-3):
    return torch.sign(x) * (torch.sqrt(x.abs() + 1) - 1) + eps * x


def scalar_to_support(x):
    x = h_transform(x).clamp(-SUPPORT, SUPPORT)
    floor = x.floor()
    prob = x - floor
    logits = torch.zeros(*x.shape, 2 * SUPPORT + 1, device=x.device)
    logits.scatter_(-1, (floor + SUPPORT).long().unsqueeze(-1), (1 - prob).unsqueeze(-1))
    idx = (floor + SUPPORT + 1).long().clamp(max=2 * SUPPORT)
    logits.scatter_add_(-1, idx.unsqueeze(-1), prob.unsqueeze(-1))
    return logits


def support_to_scalar(logits):
    x = (logits.float().softmax(-1) * SUPPORT_VALUES).sum(-1)
    return torch.sign(x) * (((torch.sqrt(1 + 4e-3 * (x.abs() + 1 + 1e-3)) - 1) / 2e-3) ** 2 - 1)


net = MuZeroNet().to(device).to(memory_format=torch.channels_last)
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")

buf_obs = torch.rand(POSITIONS, PLANES, N, N, device=device) < 0.2
buf_actions = torch.randint(0, A, (POSITIONS,), device=device)
buf_policy = torch.softmax(torch.randn(POSITIONS, A, device=device), -1)
buf_value = torch.rand(POSITIONS, device=device) * 2 - 1
buf_reward = (torch.rand(POSITIONS, device=device) < 0.01).float()
priorities = torch.ones(POSITIONS, device=device)
if device == "cuda":
    print(f"replay {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

net.train()
for step in range(3):
    probs = priorities[: POSITIONS - K - 1] ** 1.0
    probs = probs / probs.sum()
    idx = torch.multinomial(probs, BATCH, replacement=True)
    weights = (POSITIONS * probs[idx]) ** -1.0
    weights = weights / weights.max()
    unroll = idx[:, None] + torch.arange(K + 1, device=device)
    obs = buf_obs[idx].float().contiguous(memory_format=torch.channels_last)
    actions = buf_actions[unroll[:, :K]]
    target_value = scalar_to_support(buf_value[unroll])
    target_reward = scalar_to_support(buf_reward[unroll])
    target_policy = buf_policy[unroll]
    with torch.autocast(**amp):
        h, policy, value = net.initial_inference(obs)
        preds = [(value, None, policy)]
        for k in range(K):
            h, reward, policy, value = net.recurrent_inference(h, actions[:, k])
            h = scale_gradient(h, 0.5)
            preds.append((value, reward, policy))
    loss = torch.zeros(BATCH, device=device)
    for k, (value, reward, policy) in enumerate(preds):
        v_loss = -(target_value[:, k] * F.log_softmax(value.float(), -1)).sum(-1)
        p_loss = -(target_policy[:, k] * F.log_softmax(policy.float(), -1)).sum(-1)
        l = 0.25 * v_loss + p_loss
        if reward is not None:
            l = l + -(target_reward[:, k] * F.log_softmax(reward.float(), -1)).sum(-1)
        loss = loss + scale_gradient(l, 1.0 / K if k > 0 else 1.0)
    with torch.no_grad():
        new_prio = (support_to_scalar(preds[0][0]) - buf_value[idx]).abs() + 1e-6
        priorities.index_put_((idx,), new_prio)
    total = (loss * weights).mean()
    opt.zero_grad(set_to_none=True)
    scaler.scale(total).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(net.parameters(), 5.0)
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(
            f"train {step} loss {total.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del h, preds, loss, total, policy, value, reward

net.eval()
with torch.no_grad(), torch.autocast(**amp):
    roots = torch.randint(0, POSITIONS, (ROOTS,), device=device)
    obs = buf_obs[roots].float().contiguous(memory_format=torch.channels_last)
    h0, p0, v0 = net.initial_inference(obs)
    tree_h = torch.empty((SIMS + 1,) + tuple(h0.shape), dtype=h0.dtype, device=device)
    tree_h[0] = h0
    visits = torch.zeros(ROOTS, A, device=device)
    q = torch.zeros(ROOTS, A, device=device)
    prior = F.softmax(p0.float(), -1)
    parent = torch.zeros(ROOTS, dtype=torch.long, device=device)
    for sim in range(SIMS):
        ucb = q + prior * (visits.sum(-1, keepdim=True).sqrt() / (1 + visits)) * 1.25
        a = ucb.argmax(-1)
        nh, r, p, v = net.recurrent_inference(tree_h[parent, torch.arange(ROOTS, device=device)], a)
        tree_h[sim + 1] = nh
        val = support_to_scalar(r) + 0.997 * support_to_scalar(v)
        visits[torch.arange(ROOTS, device=device), a] += 1
        q[torch.arange(ROOTS, device=device), a] += val
        parent = torch.full_like(parent, sim + 1)
    best = visits.argmax(-1)
if device == "cuda":
    print(
        f"search {best.float().mean().item():.2f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
