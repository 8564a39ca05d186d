"""PPO on simulated Atari-sized observations with the rollout storage kept apart from the training memory: the
rollout buffer (uint8 frame stacks, actions, log-probabilities, values, rewards, done flags) is allocated
inside `torch.cuda.use_mem_pool(pool)` of a `torch.cuda.MemPool()`, and so is the GAE pass that writes
advantages and returns (its temporaries land in the pool too), while the policy's forwards, the minibatch
updates and Adam's state use the default pool. The environment is simulated the way a vectorised host
environment hands its frames over: each step's uint8 frames are drawn on the host by `torch.randint` and
copied to the GPU with `.to(device)`; rewards are drawn on the GPU by `torch.randn`, episode ends by
`torch.rand` < 0.01.

Policy: the Nature-DQN CNN (Conv 8x8/4 32, Conv 4x4/2 64, Conv 3x3/1 64, Linear 3,136 -> 512) on 4 x 84 x 84
frames scaled by 1/255, an 18-way categorical head and a value head; Adam, clipped surrogate loss, value loss,
entropy bonus, clip_grad_norm_ 0.5.

Phases: 0 policy, Adam, the pool and the buffer for 64 environments x 128 steps in it; 1 the first rollout
(128 steps of sampling with `torch.distributions.Categorical`) and GAE in the pool; 2 the PPO update: 4 epochs
of 8 shuffled minibatches of 1,024; 3 the buffer deleted and reallocated in the same pool (its cached segments
reused), a second rollout and update, `pool.use_count()` and the pool's snapshot (segments, bytes) printed; 4
the buffer deleted, the pool dropped, `empty_cache()`, and a greedy evaluation of 512 environments x 32 steps
under `inference_mode`, with `memory_stats()` keys printed. 5 phases. Seeded."""

import os

import torch
import torch.nn.functional as F
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3433)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    ENVS, STEPS, EPOCHS, MINIBATCHES, EVAL_ENVS, EVAL_STEPS = 4, 8, 2, 2, 8, 4
else:
    ENVS, STEPS, EPOCHS, MINIBATCHES, EVAL_ENVS, EVAL_STEPS = 64, 128, 4, 8, 512, 32
ACTIONS, GAMMA, LAM, CLIP = 18, 0.99, 0.95, 0.1
FRAME = (4, 84, 84)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, 512),
            nn.ReLU(),
        )
        self.pi = nn.Linear(512, ACTIONS)
        self.v = nn.Linear(512, 1)

    def forward(self, obs):
        h = self.body(obs.float() / 255.0)
        return self.pi(h), self.v(h).squeeze(-1)


class Pool:
    """A MemPool on the GPU; on the CPU a stand-in whose context does nothing."""

    def __init__(self):
        self.pool = torch.cuda.MemPool() if device == "cuda" else None

    def ctx(self):
        return torch.cuda.use_mem_pool(self.pool) if self.pool is not None else torch.no_grad()


def new_buffer():
    return {
        "obs": torch.zeros(STEPS, ENVS, *FRAME, dtype=torch.uint8, device=device),
        "act": torch.zeros(STEPS, ENVS, dtype=torch.long, device=device),
        "logp": torch.zeros(STEPS, ENVS, device=device),
        "val": torch.zeros(STEPS + 1, ENVS, device=device),
        "rew": torch.zeros(STEPS, ENVS, device=device),
        "done": torch.zeros(STEPS, ENVS, device=device),
    }


def host_frames(n):
    return torch.randint(0, 256, (n, *FRAME), dtype=torch.uint8).to(device)


def env_step(n):
    frames = host_frames(n)
    return frames, torch.randn(n, device=device), (torch.rand(n, device=device) < 0.01).float()


def rollout(buf):
    obs = host_frames(ENVS)
    with torch.no_grad():
        for t in range(STEPS):
            buf["obs"][t].copy_(obs)
            logits, value = policy(obs)
            dist = torch.distributions.Categorical(logits=logits)
            action = dist.sample()
            buf["act"][t] = action
            buf["logp"][t] = dist.log_prob(action)
            buf["val"][t] = value
            obs, buf["rew"][t], buf["done"][t] = env_step(ENVS)
        buf["val"][STEPS] = policy(obs)[1]


def gae(buf):
    adv = torch.zeros(STEPS, ENVS, device=device)
    last = torch.zeros(ENVS, device=device)
    for t in reversed(range(STEPS)):
        nonterminal = 1.0 - buf["done"][t]
        delta = buf["rew"][t] + GAMMA * buf["val"][t + 1] * nonterminal - buf["val"][t]
        last = delta + GAMMA * LAM * nonterminal * last
        adv[t] = last
    buf["adv"] = adv
    buf["ret"] = adv + buf["val"][:STEPS]


def update(buf):
    n = STEPS * ENVS
    obs, act, logp_old = buf["obs"].flatten(0, 1), buf["act"].flatten(), buf["logp"].flatten()
    adv, ret = buf["adv"].flatten(), buf["ret"].flatten()
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    for _ in range(EPOCHS):
        perm = torch.randperm(n, device=device)
        for idx in perm.chunk(MINIBATCHES):
            logits, value = policy(obs[idx])
            dist = torch.distributions.Categorical(logits=logits)
            ratio = (dist.log_prob(act[idx]) - logp_old[idx]).exp()
            surr = torch.min(ratio * adv[idx], ratio.clamp(1 - CLIP, 1 + CLIP) * adv[idx])
            loss = -surr.mean() + 0.5 * F.mse_loss(value, ret[idx]) - 0.01 * dist.entropy().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            opt.step()
    return loss.item()


policy = Policy().to(device)
opt = torch.optim.Adam(policy.parameters(), lr=2.5e-4, eps=1e-5)
pool = Pool()
with pool.ctx():
    buf = new_buffer()
report("policy, Adam, rollout buffer in its own MemPool")

rollout(buf)
with pool.ctx():
    gae(buf)
print(f"rollout 1: mean reward {buf['rew'].mean().item():.4f}")
report("first rollout, GAE inside the pool")

print(f"update 1: loss {update(buf):.4f}")
report("PPO update, 4 epochs x 8 minibatches")

del buf
with pool.ctx():
    buf = new_buffer()
rollout(buf)
with pool.ctx():
    gae(buf)
print(f"update 2: loss {update(buf):.4f}")
if pool.pool is not None:
    segs = pool.pool.snapshot()
    print(
        f"pool use_count {pool.pool.use_count()} segments {len(segs)} "
        f"bytes {sum(s['total_size'] for s in segs)}"
    )
report("buffer reallocated in the pool, second rollout and update")

del buf
del pool
if device == "cuda":
    torch.cuda.empty_cache()
with torch.inference_mode():
    obs = host_frames(EVAL_ENVS)
    total = torch.zeros(EVAL_ENVS, device=device)
    counts = torch.zeros(ACTIONS, dtype=torch.long, device=device)
    for _ in range(EVAL_STEPS):
        counts += torch.bincount(policy(obs)[0].argmax(-1), minlength=ACTIONS)
        obs, rew, done = env_step(EVAL_ENVS)
        total += rew * (1 - done)
print(f"eval return {total.mean().item():.4f}, most taken action {counts.argmax().item()}")
if device == "cuda":
    stats = torch.cuda.memory_stats()
    print({k: stats[k] for k in ("segment.all.current", "reserved_bytes.all.current", "num_device_free")})
report("pool released, empty_cache, greedy evaluation at 512 environments")
