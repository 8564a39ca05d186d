"""Offline RL with HF transformers DecisionTransformerModel (a GPT-2 trunk over interleaved
return-to-go, state and action tokens), built from a config at 6 layers, 512 wide, 8 heads, a
256-step context (768 tokens), state 17, action 6: trajectories of random lengths left-padded to
the context on the host (lengths from a seeded Python RNG, an attention mask of zeros over the
padding, returns-to-go by a reversed cumsum), copied to the GPU; the action loss is an MSE over the
unpadded steps only (boolean indexing by the mask); AdamW with a linear-warmup LambdaLR and gradient
clipping at 0.25, batch 48, fp32, 3 steps, then an evaluation rollout of 24 steps in a toy linear
environment on the GPU, the model re-run on the growing trajectory under no_grad; 4 phases."""

import os
import random

import torch
from transformers import DecisionTransformerConfig, DecisionTransformerModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10103)
rng = random.Random(10103)
S_DIM, A_DIM = 17, 6
if SMALL:
    cfg = DecisionTransformerConfig(
        state_dim=S_DIM, act_dim=A_DIM, hidden_size=32, n_layer=2, n_head=2, max_ep_len=256, n_positions=128
    )
    K, B, STEPS, ROLL = 16, 4, 2, 4
else:
    cfg = DecisionTransformerConfig(
        state_dim=S_DIM,
        act_dim=A_DIM,
        hidden_size=512,
        n_layer=6,
        n_head=8,
        max_ep_len=1000,
        n_positions=1024,
    )
    K, B, STEPS, ROLL = 256, 48, 3, 24
device = "cuda" if torch.cuda.is_available() else "cpu"


def batch():
    states = torch.zeros(B, K, S_DIM)
    actions = torch.zeros(B, K, A_DIM)
    rtg = torch.zeros(B, K, 1)
    timesteps = torch.zeros(B, K, dtype=torch.long)
    mask = torch.zeros(B, K)
    for b in range(B):
        n = rng.randint(K // 8, K)
        start = rng.randint(0, cfg.max_ep_len - n)
        rewards = torch.rand(n)
        states[b, K - n :] = torch.randn(n, S_DIM)
        actions[b, K - n :] = torch.rand(n, A_DIM) * 2 - 1
        rtg[b, K - n :, 0] = rewards.flip(0).cumsum(0).flip(0)
        timesteps[b, K - n :] = torch.arange(start, start + n)
        mask[b, K - n :] = 1
    return [t.to(device) for t in (states, actions, rtg, timesteps, mask)]


model = DecisionTransformerModel(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 100))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    states, actions, rtg, timesteps, mask = batch()
    out = model(
        states=states,
        actions=actions,
        rewards=None,
        returns_to_go=rtg,
        timesteps=timesteps,
        attention_mask=mask,
    )
    keep = mask.reshape(-1) > 0
    pred = out.action_preds.reshape(-1, A_DIM)[keep]
    loss = torch.nn.functional.mse_loss(pred, actions.reshape(-1, A_DIM)[keep])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    optimizer.step()
    scheduler.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} kept {int(keep.sum())}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del states, actions, rtg, timesteps, mask, out, keep, pred, loss
model.eval()
A = torch.randn(S_DIM, S_DIM, device=device) * 0.1
Bm = torch.randn(A_DIM, S_DIM, device=device) * 0.1
E = 8
state = torch.randn(E, 1, S_DIM, device=device)
states, actions = state, torch.zeros(E, 0, A_DIM, device=device)
rtg = torch.full((E, 1, 1), 100.0, device=device)
with torch.no_grad():
    for _ in range(ROLL):
        actions = torch.cat([actions, torch.zeros(E, 1, A_DIM, device=device)], dim=1)
        ts = torch.arange(states.shape[1], device=device).expand(E, -1)
        out = model(
            states=states[:, -K:],
            actions=actions[:, -K:],
            returns_to_go=rtg[:, -K:],
            timesteps=ts[:, -K:],
            attention_mask=torch.ones(E, min(states.shape[1], K), device=device),
        )
        act = out.action_preds[:, -1]
        actions[:, -1] = act
        nxt = state[:, -1] @ A + act @ Bm
        reward = -(nxt.pow(2).sum(-1, keepdim=True))
        state = nxt[:, None]
        states = torch.cat([states, state], dim=1)
        rtg = torch.cat([rtg, (rtg[:, -1] - reward)[:, None]], dim=1)
if device == "cuda":
    print(
        f"rollout {tuple(states.shape)} ret {rtg[:, -1].mean().item():.2f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
