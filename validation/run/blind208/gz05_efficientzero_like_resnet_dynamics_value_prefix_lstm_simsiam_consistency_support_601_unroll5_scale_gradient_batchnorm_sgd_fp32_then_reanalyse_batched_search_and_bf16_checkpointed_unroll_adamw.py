"""EfficientZero-like agent (Ye et al. 2021): MuZero's three networks, a value-prefix LSTM and a SimSiam
temporal consistency loss, trained on random Atari-like frames (no MCTS: visit distributions random).

Networks (EfficientZero's Atari shapes): representation from 4 stacked 96x96 RGB frames (12 channels,
uint8) by a strided conv, residual blocks with BatchNorm2d and average pooling down to a 64 x 6 x 6
latent normalised to [0, 1] per sample; dynamics on the latent concatenated with an action plane
(conv + residual block) and a value prefix from an LSTM (hidden 512) over the flattened reduced state,
fed one unroll step at a time; prediction (residual block, 1x1 convs, value over a 601-bin support of
the h(x) transformed scalar, policy over 18 actions); a SimSiam projector (1024, BN, ReLU) and
predictor head for the consistency loss against the target network's projection of the true future.

Training: batch 512, unroll K=5 with gradients into the dynamics scaled by 0.5 (x * 0.5 + x.detach() *
0.5), value, value-prefix and policy cross entropies weighted by importance-sampling weights, SGD
(momentum 0.9, weight decay 1e-4, lr warmup), clip 5.

Phases: the first step (fp32); 2 more steps; reanalysed value targets: the target network's values of
512 x 6 future observations under no_grad for 5-step bootstrapped returns; a batched-search evaluation
under inference_mode (initial inference on 512 roots, then 32 simulations each expanding one node per
root by recurrent inference from a preallocated latent pool of 33 slots, with a value-prefix LSTM state
per node); then bf16 autocast with every unroll step's dynamics checkpointed (non-reentrant),
channels_last and a foreach AdamW. 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2085)
if SMALL:
    BATCH, RES, CH, SIMS, ROOTS, LSTM_H = 8, 96, 16, 4, 8, 32
else:
    BATCH, RES, CH, SIMS, ROOTS, LSTM_H = 512, 96, 64, 32, 512, 512
ACTIONS, K, SUPPORT, STACK, GAMMA = 18, 5, 300, 4, 0.997
BINS = 2 * SUPPORT + 1
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def h(x, eps=0.001):
    return torch.sign(x) * (torch.sqrt(torch.abs(x) + 1) - 1) + eps * x


def scalar_to_support(x):
    x = h(x).clamp(-SUPPORT, SUPPORT)
    floor = x.floor()
    prob = x - floor
    logits = torch.zeros(*x.shape, BINS, device=x.device)
    idx = (floor + SUPPORT).long()
    logits.scatter_(-1, idx.unsqueeze(-1), (1 - prob).unsqueeze(-1))
    idx2 = (idx + 1).clamp(max=BINS - 1)
    logits.scatter_add_(-1, idx2.unsqueeze(-1), prob.unsqueeze(-1))
    return logits


def support_to_scalar(logits):
    probs = torch.softmax(logits.float(), dim=-1)
    support = torch.arange(-SUPPORT, SUPPORT + 1, device=logits.device, dtype=torch.float32)
    x = (probs * support).sum(-1)
    return torch.sign(x) * (
        ((torch.sqrt(1 + 4 * 0.001 * (torch.abs(x) + 1 + 0.001)) - 1) / (2 * 0.001)) ** 2 - 1
    )


class ResidualBlock(nn.Module):
    def __init__(self, c, out=None, stride=1):
        super().__init__()
        out = out or c
        self.conv1 = nn.Conv2d(c, out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.down = (
            None if stride == 1 and out == c else nn.Conv2d(c, out, 3, stride=stride, padding=1, bias=False)
        )

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


def normalize_latent(s):
    flat = s.flatten(1)
    lo, hi = flat.min(1, keepdim=True).values, flat.max(1, keepdim=True).values
    return ((flat - lo) / (hi - lo + 1e-5)).view_as(s)


class EfficientZeroNet(nn.Module):
    def __init__(self):
        super().__init__()
        c = CH
        self.rep = nn.Sequential(
            nn.Conv2d(3 * STACK, c // 2, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(c // 2),
            nn.ReLU(),
            ResidualBlock(c // 2),
            ResidualBlock(c // 2, c, stride=2),
            ResidualBlock(c),
            nn.AvgPool2d(3, stride=2, padding=1),
            ResidualBlock(c),
            nn.AvgPool2d(3, stride=2, padding=1),
            ResidualBlock(c),
        )
        self.dyn_conv = nn.Conv2d(c + 1, c, 3, padding=1, bias=False)
        self.dyn_bn = nn.BatchNorm2d(c)
        self.dyn_res = ResidualBlock(c)
        self.reward_conv = nn.Conv2d(c, 16, 1)
        self.reward_bn = nn.BatchNorm2d(16)
        self.lstm = nn.LSTM(16 * 36, LSTM_H)
        self.reward_head = nn.Sequential(
            nn.BatchNorm1d(LSTM_H), nn.ReLU(), nn.Linear(LSTM_H, 32), nn.ReLU(), nn.Linear(32, BINS)
        )
        self.pred_res = ResidualBlock(c)
        self.value_conv = nn.Conv2d(c, 16, 1)
        self.policy_conv = nn.Conv2d(c, 16, 1)
        self.value_fc = nn.Sequential(
            nn.Linear(16 * 36, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, BINS)
        )
        self.policy_fc = nn.Sequential(
            nn.Linear(16 * 36, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, ACTIONS)
        )
        self.projection = nn.Sequential(
            nn.Linear(c * 36, 1024),
            nn.BatchNorm1d(1024),
            nn.ReLU(),
            nn.Linear(1024, 1024),
            nn.BatchNorm1d(1024),
        )
        self.projection_head = nn.Sequential(
            nn.Linear(1024, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Linear(512, 1024)
        )

    def represent(self, obs):
        return normalize_latent(self.rep(obs.float() / 255.0))

    def predict(self, s):
        s = self.pred_res(s)
        v = self.value_fc(F.relu(self.value_conv(s)).flatten(1))
        p = self.policy_fc(F.relu(self.policy_conv(s)).flatten(1))
        return v, p

    def dynamics_state(self, s, action):
        plane = (action.float() / ACTIONS)[:, None, None, None].expand(-1, 1, 6, 6)
        x = torch.cat([s, plane.to(s.dtype)], dim=1)
        x = F.relu(self.dyn_bn(self.dyn_conv(x)) + s)
        return normalize_latent(self.dyn_res(x))

    def value_prefix(self, s, hc):
        r = F.relu(self.reward_bn(self.reward_conv(s))).flatten(1).unsqueeze(0)
        out, hc = self.lstm(r, hc)
        return self.reward_head(out.squeeze(0)), hc

    def project(self, s, with_head=True):
        p = self.projection(s.flatten(1))
        return self.projection_head(p) if with_head else p


def scale_gradient(x, scale):
    return x * scale + x.detach() * (1 - scale)


def make_batch(n):
    obs = torch.randint(0, 256, (n, K + 1, 3 * STACK, RES, RES), dtype=torch.uint8, device=device)
    actions = torch.randint(0, ACTIONS, (n, K), device=device)
    target_value = torch.randn(n, K + 1, device=device) * 5
    target_prefix = torch.rand(n, K, device=device) * 3
    target_policy = torch.distributions.Dirichlet(torch.full((ACTIONS,), 0.3, device=device)).sample(
        (n, K + 1)
    )
    weights = torch.rand(n, device=device) + 0.5
    return obs, actions, target_value, target_prefix, target_policy, weights


def train_step(model, target_model, opt, scaler, dtype, ckpt):
    obs, actions, t_value, t_prefix, t_policy, weights = make_batch(BATCH)
    with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None and amp):
        s = model.represent(obs[:, 0])
        v, p = model.predict(s)
        value_loss = -(scalar_to_support(t_value[:, 0]) * F.log_softmax(v.float(), -1)).sum(-1)
        policy_loss = -(t_policy[:, 0] * F.log_softmax(p.float(), -1)).sum(-1)
        prefix_loss = torch.zeros_like(value_loss)
        consistency = torch.zeros_like(value_loss)
        with torch.no_grad():
            future = target_model.represent(obs[:, 1:].flatten(0, 1))
            target_proj = target_model.project(future, with_head=False).view(BATCH, K, -1)
        hc = (torch.zeros(1, BATCH, LSTM_H, device=device), torch.zeros(1, BATCH, LSTM_H, device=device))
        for k in range(K):
            if ckpt:
                s = checkpoint(model.dynamics_state, s, actions[:, k], use_reentrant=False)
            else:
                s = model.dynamics_state(s, actions[:, k])
            prefix, hc = model.value_prefix(s, hc)
            v, p = model.predict(s)
            proj = model.project(s)
            consistency = consistency - F.cosine_similarity(proj.float(), target_proj[:, k].float(), dim=-1)
            value_loss = value_loss - (
                scalar_to_support(t_value[:, k + 1]) * F.log_softmax(v.float(), -1)
            ).sum(-1)
            policy_loss = policy_loss - (t_policy[:, k + 1] * F.log_softmax(p.float(), -1)).sum(-1)
            prefix_loss = prefix_loss - (
                scalar_to_support(t_prefix[:, k]) * F.log_softmax(prefix.float(), -1)
            ).sum(-1)
            s = scale_gradient(s, 0.5)
        loss = (weights * (0.25 * value_loss + policy_loss + prefix_loss + 2.0 * consistency)).mean()
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(opt)
    scaler.update()
    return loss.item()


model = EfficientZeroNet().to(device)
target_model = EfficientZeroNet().to(device)
target_model.load_state_dict(model.state_dict())
target_model.eval()
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 1000))
scaler = torch.amp.GradScaler("cuda", enabled=False)

model.train()
for step in range(3):
    loss = train_step(model, target_model, opt, scaler, None, False)
    sched.step()
    print(f"step {step} loss {loss:.4f}")
    if step == 0:
        report("first step")
report("train")

# reanalyse: 5-step bootstrapped value targets from the target network
with torch.no_grad():
    future_obs = torch.randint(
        0, 256, (BATCH * (K + 1), 3 * STACK, RES, RES), dtype=torch.uint8, device=device
    )
    rewards = torch.rand(BATCH, K + 5, device=device)
    values = []
    for chunk in future_obs.split(1024):
        v, _ = target_model.predict(target_model.represent(chunk))
        values.append(support_to_scalar(v))
    bootstrap = torch.cat(values).view(BATCH, K + 1)
    discounts = GAMMA ** torch.arange(5, device=device, dtype=torch.float32)
    n_step = torch.stack([(rewards[:, k : k + 5] * discounts).sum(1) for k in range(K + 1)], dim=1)
    value_targets = n_step + GAMMA**5 * bootstrap
print(f"reanalysed value target mean {value_targets.mean().item():.4f}")
report("reanalyse targets")

# batched search: a fixed-width expansion of one node per root per simulation
model.eval()
with torch.inference_mode():
    roots = torch.randint(0, 256, (ROOTS, 3 * STACK, RES, RES), dtype=torch.uint8, device=device)
    pool = torch.empty(SIMS + 1, ROOTS, CH, 6, 6, device=device)
    hidden_pool = torch.zeros(SIMS + 1, 2, ROOTS, LSTM_H, device=device)
    q_values = torch.zeros(SIMS + 1, ROOTS, device=device)
    pool[0] = model.represent(roots)
    v, p = model.predict(pool[0])
    q_values[0] = support_to_scalar(v)
    ar = torch.arange(ROOTS, device=device)
    for sim in range(1, SIMS + 1):
        parent = torch.randint(0, sim, (ROOTS,), device=device)
        s = pool[parent, ar]
        hc = (
            hidden_pool[parent, 0, ar].unsqueeze(0).contiguous(),
            hidden_pool[parent, 1, ar].unsqueeze(0).contiguous(),
        )
        action = torch.multinomial(F.softmax(p, -1), 1).squeeze(1)
        s = model.dynamics_state(s, action)
        prefix, (h_, c_) = model.value_prefix(s, hc)
        v, p = model.predict(s)
        pool[sim] = s
        hidden_pool[sim, 0], hidden_pool[sim, 1] = h_[0], c_[0]
        q_values[sim] = support_to_scalar(prefix) + GAMMA * support_to_scalar(v)
    best = q_values.max(0).values
print(f"search best value mean {best.mean().item():.4f}")
report("batched search")

# bf16 autocast, checkpointed dynamics per unroll step, channels_last, foreach AdamW
del opt, sched, pool, hidden_pool, future_obs
model = model.to(memory_format=torch.channels_last)
target_model = target_model.to(memory_format=torch.channels_last)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-4, foreach=True)
for step in range(2):
    loss = train_step(model, target_model, opt, scaler, torch.bfloat16, True)
    print(f"bf16 checkpointed step {step} loss {loss:.4f}")
report("bf16 checkpointed unroll")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
