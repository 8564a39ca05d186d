"""IMPALA as torchbeast's polybeast learner writes it: the deep ResNet of the paper (3 sections of a
3x3 conv, 3x3/2 max pool and two residual blocks, 16/32/32 channels) over 84x84x4 uint8 frames, an
fc of 256 with the clipped reward and one-hot last action concatenated, an LSTM core stepped one
step at a time with the state zeroed at episode ends, policy and baseline heads; on-GPU actors fill
a batch of 96 unrolls of 20+1 steps under no_grad (frames drawn on the GPU, actions sampled by
multinomial); the learner computes V-trace from logits (clipped importance weights, a reversed
loop over time), policy-gradient, baseline and entropy losses; bf16 autocast, RMSprop (eps 0.01,
alpha 0.99) with a linear lr decay by LambdaLR, grad clip 40; 3 learner steps, then greedy
evaluation of 256 environments for 32 steps; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12302)
T = 5 if SMALL else 20
B = 4 if SMALL else 96
N_ACT = 18
FRAME = (4, 84, 84)
EVAL_ENVS = 8 if SMALL else 256
device = "cuda" if torch.cuda.is_available() else "cpu"


class ResBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.c0 = nn.Conv2d(ch, ch, 3, padding=1)
        self.c1 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x):
        return x + self.c1(F.relu(self.c0(F.relu(x))))


class Net(nn.Module):
    def __init__(self, use_lstm=True):
        super().__init__()
        sections, in_ch = [], FRAME[0]
        for ch in (16, 32, 32):
            sections += [
                nn.Conv2d(in_ch, ch, 3, padding=1),
                nn.MaxPool2d(3, stride=2, padding=1),
                ResBlock(ch),
                ResBlock(ch),
            ]
            in_ch = ch
        self.feat = nn.Sequential(*sections)
        self.fc = nn.Linear(32 * 11 * 11, 256)
        core_in = 256 + N_ACT + 1
        self.use_lstm = use_lstm
        self.core = nn.LSTM(core_in, 256, num_layers=1)
        self.policy = nn.Linear(256, N_ACT)
        self.baseline = nn.Linear(256, 1)

    def initial_state(self, batch_size):
        return tuple(torch.zeros(1, batch_size, 256, device=device) for _ in range(2))

    def forward(self, inputs, core_state):
        x = inputs["frame"]
        t, b = x.shape[:2]
        x = torch.flatten(x, 0, 1).float() / 255.0
        x = F.relu(self.feat(x))
        x = F.relu(self.fc(x.view(t * b, -1)))
        one_hot = F.one_hot(inputs["last_action"].view(t * b), N_ACT).float()
        reward = torch.clamp(inputs["reward"], -1, 1).view(t * b, 1)
        core_input = torch.cat([x, reward, one_hot], dim=-1).view(t, b, -1)
        notdone = (~inputs["done"]).float()
        outs = []
        for inp, nd in zip(core_input.unbind(), notdone.unbind()):
            nd = nd.view(1, -1, 1)
            core_state = tuple(nd * s for s in core_state)
            out, core_state = self.core(inp.unsqueeze(0), core_state)
            outs.append(out)
        core_output = torch.flatten(torch.cat(outs), 0, 1)
        policy_logits = self.policy(core_output)
        baseline = self.baseline(core_output)
        if self.training:
            action = torch.multinomial(F.softmax(policy_logits.float(), dim=1), 1)
        else:
            action = torch.argmax(policy_logits, dim=1)
        return (
            dict(
                policy_logits=policy_logits.view(t, b, N_ACT),
                baseline=baseline.view(t, b),
                action=action.view(t, b),
            ),
            core_state,
        )


def action_log_probs(policy_logits, actions):
    return -F.nll_loss(
        F.log_softmax(torch.flatten(policy_logits, 0, -2), dim=-1),
        torch.flatten(actions),
        reduction="none",
    ).view_as(actions)


@torch.no_grad()
def vtrace_from_logits(behavior_logits, target_logits, actions, discounts, rewards, values, bootstrap):
    log_rhos = action_log_probs(target_logits, actions) - action_log_probs(behavior_logits, actions)
    rhos = torch.exp(log_rhos)
    clipped_rhos = torch.clamp(rhos, max=1.0)
    cs = torch.clamp(rhos, max=1.0)
    values_t_plus_1 = torch.cat([values[1:], torch.unsqueeze(bootstrap, 0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)
    acc = torch.zeros_like(bootstrap)
    result = []
    for t in range(discounts.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        result.append(acc)
    result.reverse()
    vs_minus_v_xs = torch.stack(result)
    vs = torch.add(vs_minus_v_xs, values)
    vs_t_plus_1 = torch.cat([vs[1:], torch.unsqueeze(bootstrap, 0)], dim=0)
    pg_advantages = torch.clamp(rhos, max=1.0) * (rewards + discounts * vs_t_plus_1 - values)
    return vs, pg_advantages


@torch.no_grad()
def act(model, n_envs, steps, state):
    frames = torch.randint(0, 256, (steps + 1, n_envs) + FRAME, dtype=torch.uint8, device=device)
    batch = dict(
        frame=frames,
        reward=torch.zeros(steps + 1, n_envs, device=device),
        done=torch.zeros(steps + 1, n_envs, dtype=torch.bool, device=device),
        last_action=torch.zeros(steps + 1, n_envs, dtype=torch.long, device=device),
        policy_logits=torch.zeros(steps + 1, n_envs, N_ACT, device=device),
    )
    init = tuple(s.clone() for s in state)
    for t in range(steps + 1):
        step_in = {k: batch[k][t : t + 1] for k in ("frame", "reward", "done", "last_action")}
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            out, state = model(step_in, state)
        batch["policy_logits"][t] = out["policy_logits"][0].float()
        if t + 1 <= steps:
            batch["last_action"][t + 1] = out["action"][0]
            batch["reward"][t + 1] = torch.randn(n_envs, device=device)
            batch["done"][t + 1] = torch.rand(n_envs, device=device) < 0.01
    return batch, init, state


model = Net().to(device)
learner = Net().to(device)
learner.load_state_dict(model.state_dict())
optimizer = torch.optim.RMSprop(learner.parameters(), lr=4.8e-4, momentum=0, eps=0.01, alpha=0.99)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1 - min(epoch * T * B, 1e9) / 1e9)
actor_state = model.initial_state(B)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

batch, init_state, actor_state = act(model, B, T, actor_state)
if device == "cuda":
    print(f"actors {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        learner_outputs, _ = learner(batch, init_state)
    bootstrap_value = learner_outputs["baseline"][-1].float()
    b = {k: v[1:] for k, v in batch.items()}
    lo = {k: v[:-1].float() for k, v in learner_outputs.items()}
    rewards = torch.clamp(b["reward"], -1, 1)
    discounts = (~b["done"]).float() * 0.99
    vs, pg_adv = vtrace_from_logits(
        b["policy_logits"], lo["policy_logits"], b["last_action"], discounts, rewards,
        lo["baseline"], bootstrap_value,
    )
    cross_entropy = F.nll_loss(
        F.log_softmax(torch.flatten(lo["policy_logits"], 0, 1), dim=-1),
        target=torch.flatten(b["last_action"], 0, 1),
        reduction="none",
    ).view_as(pg_adv)
    pg_loss = torch.sum(cross_entropy * pg_adv.detach())
    baseline_loss = 0.5 * 0.5 * torch.sum((vs - lo["baseline"]) ** 2)
    policy = F.softmax(lo["policy_logits"], dim=-1)
    entropy_loss = 0.0006 * torch.sum(policy * F.log_softmax(lo["policy_logits"], dim=-1))
    total_loss = pg_loss + baseline_loss + entropy_loss
    optimizer.zero_grad()
    total_loss.backward()
    nn.utils.clip_grad_norm_(learner.parameters(), 40.0)
    optimizer.step()
    scheduler.step()
    model.load_state_dict(learner.state_dict())
    if device == "cuda":
        print(
            f"learn {step} loss {total_loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del learner_outputs, lo, vs, pg_adv, total_loss

model.eval()
state = model.initial_state(EVAL_ENVS)
returns = torch.zeros(EVAL_ENVS, device=device)
with torch.no_grad():
    _, _, state = act(model, EVAL_ENVS, 32 if not SMALL else 4, state)
    returns += state[0].float().mean()
if device == "cuda":
    print(
        f"eval {returns.mean().item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
