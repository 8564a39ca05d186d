"""robomimic's BC-RNN-GMM, written by hand: at every one of 10 timesteps two 84 x 84 cameras (agentview and
eye-in-hand, float frames in [0, 1] made on the device) go through a torchvision ResNet-18 trunk (random
init, BatchNorm, cut after layer4: 3 x 3 maps) and a spatial-softmax keypoint layer (32 keypoints, a 1x1
conv first), concatenated with the 9-dim low-dimensional state; a 2-layer nn.LSTM (hidden 1000,
batch_first) runs over the sequence and a GMM head (5 modes, 7-dim actions: means through tanh, scales
through softplus + 1e-4, mixture logits) gives a torch.distributions.MixtureSameFamily(Categorical,
Independent(Normal)) whose negative log-likelihood of the demo actions is the loss. fp32, batch 64
sequences (1,280 images per step), Adam (lr 1e-4, weight decay 0), gradient clipping at 1.0 by global
norm.

Phases: the first step; 3 more steps; a closed-loop rollout under torch.inference_mode with a .half()
copy of the policy for 32 environments over 20 control steps, one frame at a time with the LSTM state
carried (h, c), the low-noise action (the mean of the most likely mode) moved to the host each step;
then an ensemble of 5 Q-function critics (MLPs 64 + 7 -> 512 -> 512 -> 1 over detached observation
features) built with torch.func.stack_module_state and trained with vmap(functional_call) for 3 steps
on a TD-style MSE target with one Adam over the stacked parameters. 4 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch import distributions as D
from torch.func import functional_call, stack_module_state, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18906)
if SMALL:
    B, SEQ, STEPS, RES, N_ENV, CONTROL, HID = 2, 3, 1, 84, 2, 2, 64
else:
    B, SEQ, STEPS, RES, N_ENV, CONTROL, HID = 64, 10, 3, 84, 32, 20, 1000
STATE, ACT, MODES, KP, N_CRITICS = 9, 7, 5, 32, 5
device = "cuda" if torch.cuda.is_available() else "cpu"


class SpatialSoftmax(nn.Module):
    def __init__(self, cin, kp):
        super().__init__()
        self.conv = nn.Conv2d(cin, kp, 1)

    def forward(self, x):
        x = self.conv(x)
        n, k, h, w = x.shape
        pos_x, pos_y = torch.meshgrid(
            torch.linspace(-1.0, 1.0, w, device=x.device),
            torch.linspace(-1.0, 1.0, h, device=x.device),
            indexing="xy",
        )
        attn = F.softmax(x.reshape(n * k, h * w), dim=-1)
        coords = torch.stack([pos_x.reshape(-1), pos_y.reshape(-1)], dim=-1).to(attn.dtype)
        return (attn @ coords).view(n, k * 2)


class VisualCore(nn.Module):
    def __init__(self):
        super().__init__()
        r = torchvision.models.resnet18(weights=None)
        self.trunk = nn.Sequential(*list(r.children())[:-2])
        self.pool = SpatialSoftmax(512, KP)
        self.proj = nn.Linear(2 * KP, 64)

    def forward(self, x):
        return self.proj(self.pool(self.trunk(x)))


class BCRNNGMM(nn.Module):
    def __init__(self):
        super().__init__()
        self.agent_core = VisualCore()
        self.hand_core = VisualCore()
        self.rnn = nn.LSTM(64 * 2 + STATE, HID, num_layers=2, batch_first=True)
        self.mean = nn.Linear(HID, MODES * ACT)
        self.scale = nn.Linear(HID, MODES * ACT)
        self.logits = nn.Linear(HID, MODES)

    def features(self, agent, hand, state):
        b, t = state.shape[:2]
        fa = self.agent_core(agent.flatten(0, 1)).view(b, t, -1)
        fh = self.hand_core(hand.flatten(0, 1)).view(b, t, -1)
        return torch.cat([fa, fh, state], dim=-1)

    def forward(self, agent, hand, state, hidden=None):
        out, hidden = self.rnn(self.features(agent, hand, state), hidden)
        b, t = out.shape[:2]
        means = torch.tanh(self.mean(out)).view(b, t, MODES, ACT)
        scales = F.softplus(self.scale(out)).view(b, t, MODES, ACT) + 1e-4
        logits = self.logits(out)
        return means, scales, logits, hidden


def gmm(means, scales, logits):
    comp = D.Independent(D.Normal(means, scales), 1)
    return D.MixtureSameFamily(D.Categorical(logits=logits), comp)


policy = BCRNNGMM().to(device)
opt = torch.optim.Adam(policy.parameters(), lr=1e-4)
print(f"params {sum(p.numel() for p in policy.parameters()) / 1e6:.1f}M")
if device == "cuda":
    print(f"policy {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def batch(bsz, t):
    agent = torch.rand(bsz, t, 3, RES, RES, device=device)
    hand = torch.rand(bsz, t, 3, RES, RES, device=device)
    state = torch.randn(bsz, t, STATE, device=device)
    actions = torch.rand(bsz, t, ACT, device=device) * 2 - 1
    return agent, hand, state, actions


def train_step():
    agent, hand, state, actions = batch(B, SEQ)
    means, scales, logits, _ = policy(agent, hand, state)
    loss = -gmm(means, scales, logits).log_prob(actions).mean()
    opt.zero_grad()
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()
    return loss.item(), gn.item()


policy.train()
loss, gn = train_step()
print(f"step 0 nll {loss:.4f} grad norm {gn:.3f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    loss, gn = train_step()
    print(f"step {step} nll {loss:.4f} grad norm {gn:.3f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

half_policy = copy.deepcopy(policy).half().eval()
taken = []
with torch.inference_mode():
    hidden = None
    for _ in range(CONTROL):
        agent, hand, state, _ = batch(N_ENV, 1)
        means, scales, logits, hidden = half_policy(agent.half(), hand.half(), state.half(), hidden)
        best = logits.argmax(-1)  # (N_ENV, 1)
        action = means.gather(2, best[..., None, None].expand(-1, -1, 1, ACT)).squeeze(2)
        taken.append(action.float().cpu())
print(f"rollout actions {torch.cat(taken, 1).shape}")
if device == "cuda":
    print(f"rollout peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

del half_policy
critics = [
    nn.Sequential(
        nn.Linear(64 * 2 + STATE + ACT, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1)
    ).to(device)
    for _ in range(N_CRITICS)
]
params, buffers = stack_module_state(critics)
base = copy.deepcopy(critics[0]).to("meta")
critic_opt = torch.optim.Adam(params.values(), lr=3e-4)


def q_fn(p, b, x):
    return functional_call(base, (p, b), (x,))


for step in range(3):
    agent, hand, state, actions = batch(B, SEQ)
    with torch.no_grad():
        feats = policy.features(agent, hand, state)
    x = torch.cat([feats, actions], dim=-1).flatten(0, 1)
    target = torch.randn(x.shape[0], 1, device=device)
    q = vmap(q_fn, in_dims=(0, 0, None))(params, buffers, x)  # (N_CRITICS, N, 1)
    critic_loss = F.mse_loss(q, target.expand_as(q))
    critic_opt.zero_grad()
    critic_loss.backward()
    critic_opt.step()
    print(f"critic step {step} loss {critic_loss.item():.4f}")
if device == "cuda":
    print(f"critics allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
