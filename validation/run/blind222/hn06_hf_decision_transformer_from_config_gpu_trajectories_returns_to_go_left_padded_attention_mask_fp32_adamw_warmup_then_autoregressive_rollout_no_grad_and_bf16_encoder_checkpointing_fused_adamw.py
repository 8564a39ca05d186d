"""A Decision Transformer (Chen et al. 2021) for continuous control, the Hugging Face model built from
DecisionTransformerConfig (no pretrained files): state 17, action 6 (HalfCheetah-sized), hidden 512,
8 GPT-2 layers of 8 heads, context K = 50 (150 tokens: return-to-go, state, action per step), timestep
embeddings up to 1,000, tanh action head.

An offline dataset of 1,200 random trajectories of 1,000 steps lives on the GPU (states, actions,
rewards; returns-to-go by a flipped cumsum, scaled by 1/1000; states normalised by their mean and
std). Segments are sampled as the HF training example does, but on the GPU: starts drawn by
torch.randint from -(K - 1) so early segments are left-padded, gathered by index arithmetic, the padded
positions zeroed and masked out of the attention_mask and of the action MSE.

Phases: 10 steps in fp32 at batch 256 with AdamW (lr 1e-4, weight decay 1e-4, a LambdaLR linear
warmup, clip 0.25); an autoregressive evaluation of 128 toy linear-dynamics environments for 60 steps
under no_grad (the context grows to K, then slides; the target return decremented by the rewards); then
non-reentrant gradient checkpointing enabled on the GPT-2 encoder (the DecisionTransformerModel wrapper refuses
gradient_checkpointing_enable), 6 steps under bf16 autocast at batch 512 with a fused AdamW; then
empty_cache() and a single inference_mode forward over 2,048 full-context segments. 4 phases."""

import os

import torch
from transformers import DecisionTransformerConfig, DecisionTransformerModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2226)
device = "cuda" if torch.cuda.is_available() else "cpu"
S, A, K, EP = 17, 6, 50, 1000
EPISODES, BATCH, BIG_BATCH, EVAL_ENVS, EVAL_BATCH = (16, 8, 16, 4, 16) if SMALL else (1200, 256, 512, 128, 2048)
cfg = DecisionTransformerConfig(
    state_dim=S, act_dim=A, hidden_size=128 if SMALL else 512, n_layer=2 if SMALL else 8, n_head=8,
    n_inner=None, max_ep_len=EP, n_positions=3 * K, action_tanh=True, resid_pdrop=0.1, attn_pdrop=0.1,
    embd_pdrop=0.1,
)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = DecisionTransformerModel(cfg).to(device)
states = torch.randn(EPISODES, EP, S, device=device)
actions = torch.rand(EPISODES, EP, A, device=device) * 2 - 1
rewards = torch.randn(EPISODES, EP, device=device)
rtg = rewards.flip(1).cumsum(1).flip(1) / 1000.0
state_mean, state_std = states.mean((0, 1)), states.std((0, 1)) + 1e-6
print("dataset", torch.cuda.memory_allocated() if device == "cuda" else 0)


def get_batch(batch):
    ep = torch.randint(0, EPISODES, (batch,), device=device)
    start = torch.randint(-(K - 1), EP - K + 1, (batch,), device=device)
    t = start[:, None] + torch.arange(K, device=device)
    valid = t >= 0
    tc = t.clamp_min(0)
    s = (states[ep[:, None], tc] - state_mean) / state_std * valid[..., None]
    a = actions[ep[:, None], tc] * valid[..., None]
    r = rewards[ep[:, None], tc][..., None] * valid[..., None]
    g = rtg[ep[:, None], tc][..., None] * valid[..., None]
    return s, a, r, g, tc * valid, valid


def train_step(opt, sched, batch, amp):
    s, a, r, g, ts, valid = get_batch(batch)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        _, action_preds, _ = model(
            states=s, actions=a, rewards=r, returns_to_go=g, timesteps=ts, attention_mask=valid.long(), return_dict=False
        )
    err = (action_preds.float() - a).square().mean(-1)
    loss = (err * valid).sum() / valid.sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    opt.step()
    sched.step()
    return loss.detach()


opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min((step + 1) / 10, 1.0))
model.train()
losses = [train_step(opt, sched, BATCH, amp=False) for _ in range(10)]
print("fp32 losses", torch.stack(losses)[[0, -1]].tolist())
report("train fp32 adamw")

model.eval()
dyn = torch.randn(S + A, S, device=device) * 0.1
obs = torch.randn(EVAL_ENVS, S, device=device)
ctx_s = torch.zeros(EVAL_ENVS, 0, S, device=device)
ctx_a = torch.zeros(EVAL_ENVS, 0, A, device=device)
ctx_r = torch.zeros(EVAL_ENVS, 0, 1, device=device)
ctx_g = torch.zeros(EVAL_ENVS, 0, 1, device=device)
ctx_t = torch.zeros(EVAL_ENVS, 0, dtype=torch.long, device=device)
target = torch.full((EVAL_ENVS, 1, 1), 3.6, device=device)
total = torch.zeros(EVAL_ENVS, device=device)
with torch.no_grad():
    for step in range(60):
        ctx_s = torch.cat([ctx_s, ((obs - state_mean) / state_std)[:, None]], 1)[:, -K:]
        ctx_a = torch.cat([ctx_a, torch.zeros(EVAL_ENVS, 1, A, device=device)], 1)[:, -K:]
        ctx_r = torch.cat([ctx_r, torch.zeros(EVAL_ENVS, 1, 1, device=device)], 1)[:, -K:]
        ctx_g = torch.cat([ctx_g, target], 1)[:, -K:]
        ctx_t = torch.cat([ctx_t, torch.full((EVAL_ENVS, 1), step, dtype=torch.long, device=device)], 1)[:, -K:]
        mask = torch.ones(EVAL_ENVS, ctx_s.shape[1], dtype=torch.long, device=device)
        _, action_preds, _ = model(
            states=ctx_s, actions=ctx_a, rewards=ctx_r, returns_to_go=ctx_g, timesteps=ctx_t, attention_mask=mask,
            return_dict=False,
        )
        act = action_preds[:, -1]
        ctx_a[:, -1] = act
        obs = torch.tanh(torch.cat([obs, act], 1) @ dyn) + 0.01 * torch.randn_like(obs)
        rew = obs[:, 0] - 0.1 * act.square().sum(1)
        ctx_r[:, -1, 0] = rew
        target = target - rew[:, None, None] / 1000.0
        total += rew
print("eval return", total.mean().item())
report("rollout no_grad")

model.train()
# DecisionTransformerModel itself refuses gradient_checkpointing_enable(); its GPT-2 encoder supports it
model.encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
del opt, sched
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4, fused=device == "cuda")
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
losses = [train_step(opt, sched, BIG_BATCH, amp=device == "cuda") for _ in range(6)]
print("bf16 checkpointed losses", torch.stack(losses)[[0, -1]].tolist())
report("train bf16 checkpointing fused adamw")

del opt, sched
if device == "cuda":
    torch.cuda.empty_cache()
model.eval()
with torch.inference_mode():
    s, a, r, g, ts, valid = get_batch(EVAL_BATCH)
    _, action_preds, _ = model(
        states=s, actions=a, rewards=r, returns_to_go=g, timesteps=ts, attention_mask=valid.long(), return_dict=False
    )
    mse = ((action_preds - a).square().mean(-1) * valid).sum() / valid.sum()
print("held-out action mse", mse.item())
report("inference_mode full context")
