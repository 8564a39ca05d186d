"""Offline reinforcement learning with Hugging Face's Decision Transformer built from a
DecisionTransformerConfig (random init) at Humanoid size: states of 376, actions of 17 (tanh head), hidden
256, 4 GPT-2 layers of 8 heads, context K = 30 steps (90 tokens: return-to-go, state, action), episodes up to
1,000 steps. The model is built with `attn_implementation="eager"` and `reorder_and_upcast_attn=True`,
`scale_attn_by_inverse_layer_idx=True`: GPT-2's Megatron-style attention path, an fp32 `torch.baddbmm` into a
preallocated buffer with autocast off, an fp32 softmax, then the weights cast back to the values' dtype.

An offline dataset of 400 random episodes of 1,000 steps lives on the GPU (states, actions, rewards; returns
to go by a flipped cumsum, scaled by 1/1000). Segments of K steps start anywhere in an episode (no padding);
the loss is the MSE of the predicted actions.

Phases: 0 model, dataset and AdamW (foreach=False, weight decay 1e-4); 1 four training steps under bf16
`torch.autocast` at batch 128 with clip_grad_norm_ 0.25; 2 the action MSE of 1,024 held-out segments in eval
mode under `torch.no_grad` and bf16 autocast; 3 the model cast with `.half()` and rolled out autoregressively
for 48 environment steps in 64 toy linear-dynamics environments under `torch.inference_mode` (the context
grows to K then slides; the target return decremented by the rewards). Seeded; no sizes depend on values."""

import os

import torch
from transformers import DecisionTransformerConfig, DecisionTransformerModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(360_04)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
S, A = 376, 17
if SMALL:
    K, EP, EPISODES, B1, B2, ENVS, STEPS, H, L = 5, 50, 8, 4, 8, 2, 8, 64, 2
else:
    K, EP, EPISODES, B1, B2, ENVS, STEPS, H, L = 30, 1000, 400, 128, 1024, 64, 48, 256, 4

config = DecisionTransformerConfig(
    state_dim=S,
    act_dim=A,
    hidden_size=H,
    n_layer=L,
    n_head=8,
    max_ep_len=EP,
    n_positions=3 * K,
    action_tanh=True,
    resid_pdrop=0.1,
    attn_pdrop=0.1,
    embd_pdrop=0.1,
    reorder_and_upcast_attn=True,
    scale_attn_by_inverse_layer_idx=True,
)
config._attn_implementation = "eager"


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


model = DecisionTransformerModel(config).to(device)
print(
    f"attention: {model.config._attn_implementation}, "
    f"parameters {sum(p.numel() for p in model.parameters()):,}"
)
states = torch.randn(EPISODES, EP, S, device=device)
actions = torch.rand(EPISODES, EP, A, device=device) * 2 - 1
rewards = torch.randn(EPISODES, EP, device=device) + 1
rtg = rewards.flip(1).cumsum(1).flip(1) / 1000.0
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4, foreach=False)
report("phase0 model, dataset, AdamW foreach=False")


def get_batch(n):
    ep = torch.randint(0, EPISODES, (n,), device=device)
    start = torch.randint(0, EP - K + 1, (n,), device=device)
    t = start[:, None] + torch.arange(K, device=device)
    return dict(
        states=states[ep[:, None], t],
        actions=actions[ep[:, None], t],
        rewards=rewards[ep[:, None], t][..., None],
        returns_to_go=rtg[ep[:, None], t][..., None],
        timesteps=t,
        attention_mask=torch.ones(n, K, device=device, dtype=torch.long),
    )


model.train()
for step in range(4):
    batch = get_batch(B1)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        action_preds = model(**batch).action_preds
        loss = torch.nn.functional.mse_loss(action_preds.float(), batch["actions"])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step}: action mse {loss.item():.4f}")
del batch, action_preds, loss
report("phase1 bf16 autocast training, upcast attention, batch 128")

model.eval()
batch = get_batch(B2)
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
    action_preds = model(**batch).action_preds
    mse = torch.nn.functional.mse_loss(action_preds.float(), batch["actions"])
print(f"held-out action mse {mse.item():.4f}")
del batch, action_preds, mse, opt
report("phase2 no_grad eval, 1024 segments")

model = model.half()
dyn = torch.randn(S, S, device=device) * 0.05
ctrl = torch.randn(A, S, device=device) * 0.1
with torch.inference_mode():
    s = torch.randn(ENVS, 1, S, device=device)
    a = torch.zeros(ENVS, 0, A, device=device)
    r = torch.zeros(ENVS, 0, 1, device=device)
    g = torch.full((ENVS, 1, 1), 3.0, device=device)
    total = torch.zeros(ENVS, device=device)
    for t in range(STEPS):
        ctx = min(t + 1, K)
        pad_a = torch.cat([a, torch.zeros(ENVS, 1, A, device=device)], dim=1)[:, -ctx:]
        pad_r = torch.cat([r, torch.zeros(ENVS, 1, 1, device=device)], dim=1)[:, -ctx:]
        steps = torch.arange(t + 1 - ctx, t + 1, device=device).expand(ENVS, -1)
        out = model(
            states=s[:, -ctx:].half(),
            actions=pad_a.half(),
            rewards=pad_r.half(),
            returns_to_go=g[:, -ctx:].half(),
            timesteps=steps,
            attention_mask=torch.ones(ENVS, ctx, device=device, dtype=torch.long),
        )
        act = out.action_preds[:, -1].float()
        nxt = s[:, -1] @ dyn + act @ ctrl
        rew = -(nxt.pow(2).mean(-1)) + 1
        total += rew
        s = torch.cat([s, nxt[:, None]], dim=1)
        a = torch.cat([a, act[:, None]], dim=1)
        r = torch.cat([r, rew[:, None, None]], dim=1)
        g = torch.cat([g, (g[:, -1] - rew[:, None] / 1000.0)[:, None]], dim=1)
print(f"rollout return {total.mean().item():.3f}")
del s, a, r, g, out, total
report("phase3 fp16 half rollout, inference_mode")
