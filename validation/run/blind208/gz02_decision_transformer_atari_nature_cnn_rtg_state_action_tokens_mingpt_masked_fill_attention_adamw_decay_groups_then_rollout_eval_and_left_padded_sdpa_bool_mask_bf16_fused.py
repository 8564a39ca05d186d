"""Decision Transformer for Atari (Chen et al. 2021) written by hand, trained on random trajectories.

Model: (return-to-go, state, action) tokens interleaved into 3K tokens; states are 4 stacked 84x84
uint8 frames through the Nature CNN (Conv 8/4, 4/2, 3/1, ReLU, Linear to d, tanh), returns through
Linear(1, d) + tanh, actions through an Embedding of 18, a global timestep Embedding(10,000) added to
all three; a minGPT of 8 layers (d 512, 8 heads, MLP 2048 GELU, dropout 0.1) whose causal attention is
written by hand (q @ k^T, masked_fill of a registered tril buffer with -inf, softmax, attention dropout);
actions predicted from the state tokens (Linear to 18, cross entropy).

Phases: the first optimizer step (fp32, context K=30, batch 64, AdamW with minGPT's decay/no-decay
groups, linear warmup by LambdaLR, clip 1.0); 2 more steps; an evaluation rollout of 32 games for 60
steps under no_grad in eval mode (the context grows to K then slides; next frames random from a fake
environment, actions sampled from the softmax by torch.multinomial, returns-to-go decremented by fake
rewards); then the gym-style variant: left-padded trajectories (seeded host lengths 10..30) with the
attention switched to F.scaled_dot_product_attention under a boolean causal-and-padding mask, bf16
autocast and a fresh fused AdamW, batch 96. 4 phases."""

import math
import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2082)
random.seed(2082)
if SMALL:
    D, HEADS, LAYERS, K, BATCH, GAMES, EVAL_STEPS, BATCH2 = 64, 4, 2, 6, 4, 2, 8, 4
else:
    D, HEADS, LAYERS, K, BATCH, GAMES, EVAL_STEPS, BATCH2 = 512, 8, 8, 30, 64, 32, 60, 96
ACTIONS, MAX_T = 18, 10000
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.key = nn.Linear(D, D)
        self.query = nn.Linear(D, D)
        self.value = nn.Linear(D, D)
        self.attn_drop = nn.Dropout(0.1)
        self.resid_drop = nn.Dropout(0.1)
        self.proj = nn.Linear(D, D)
        T = 3 * K
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))
        self.use_sdpa = False

    def forward(self, x, attn_mask=None):
        B, T, C = x.size()
        k = self.key(x).view(B, T, HEADS, C // HEADS).transpose(1, 2)
        q = self.query(x).view(B, T, HEADS, C // HEADS).transpose(1, 2)
        v = self.value(x).view(B, T, HEADS, C // HEADS).transpose(1, 2)
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=0.1 if self.training else 0.0
            )
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_drop(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.ln2 = nn.LayerNorm(D)
        self.attn = CausalSelfAttention()
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D), nn.Dropout(0.1))

    def forward(self, x, attn_mask=None):
        x = x + self.attn(self.ln1(x), attn_mask)
        return x + self.mlp(self.ln2(x))


class DecisionTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.state_encoder = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, D),
            nn.Tanh(),
        )
        self.ret_emb = nn.Sequential(nn.Linear(1, D), nn.Tanh())
        self.action_emb = nn.Sequential(nn.Embedding(ACTIONS, D), nn.Tanh())
        self.pos_emb = nn.Parameter(torch.zeros(1, 3 * K, D))
        self.global_pos_emb = nn.Embedding(MAX_T + 1, D)
        self.drop = nn.Dropout(0.1)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, ACTIONS, bias=False)
        self.apply(self._init)

    def _init(self, m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.weight.data.normal_(mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.data.zero_()
        elif isinstance(m, nn.LayerNorm):
            m.bias.data.zero_()
            m.weight.data.fill_(1.0)

    def forward(self, states, actions, rtgs, timesteps, attn_mask=None):
        # states (B, T, 4, 84, 84) uint8; actions (B, T) long; rtgs (B, T, 1); timesteps (B, T)
        B, T = actions.shape
        s = self.state_encoder(states.reshape(-1, 4, 84, 84).float() / 255.0).view(B, T, D)
        r = self.ret_emb(rtgs)
        a = self.action_emb(actions)
        tok = torch.stack((r, s, a), dim=2).reshape(B, 3 * T, D)
        pos = self.global_pos_emb(timesteps).repeat_interleave(3, dim=1) + self.pos_emb[:, : 3 * T]
        x = self.drop(tok + pos)
        for blk in self.blocks:
            x = blk(x, attn_mask)
        logits = self.head(self.ln_f(x))
        return logits[:, 1::3]  # predict a_t from the s_t token


def configure_optimizers(model, fused):
    decay, no_decay = set(), set()
    for mn, m in model.named_modules():
        for pn, _ in m.named_parameters(recurse=False):
            fpn = f"{mn}.{pn}" if mn else pn
            if pn.endswith("bias") or isinstance(m, (nn.LayerNorm, nn.Embedding)):
                no_decay.add(fpn)
            elif pn.endswith("weight"):
                decay.add(fpn)
    no_decay.add("pos_emb")
    params = dict(model.named_parameters())
    groups = [
        {"params": [params[n] for n in sorted(decay)], "weight_decay": 0.1},
        {"params": [params[n] for n in sorted(no_decay)], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), fused=fused)


def batch(n):
    states = torch.randint(0, 256, (n, K, 4, 84, 84), dtype=torch.uint8, device=device)
    actions = torch.randint(0, ACTIONS, (n, K), device=device)
    rtgs = torch.rand(n, K, 1, device=device) * 20
    start = torch.randint(0, MAX_T - K, (n, 1), device=device)
    return states, actions, rtgs, start + torch.arange(K, device=device)


model = DecisionTransformer().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = configure_optimizers(model, fused=False)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 512))

model.train()
for step in range(3):
    states, actions, rtgs, ts = batch(BATCH)
    logits = model(states, actions, rtgs, ts)
    loss = F.cross_entropy(logits.reshape(-1, ACTIONS), actions.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0:
        report("first step")
report("train")

# evaluation rollout: GAMES games in parallel, context grows to K then slides
model.eval()
with torch.no_grad():
    states = torch.randint(0, 256, (GAMES, 1, 4, 84, 84), dtype=torch.uint8, device=device)
    rtgs = torch.full((GAMES, 1, 1), 20.0, device=device)
    actions = torch.zeros(GAMES, 1, dtype=torch.long, device=device)
    timesteps = torch.zeros(GAMES, 1, dtype=torch.long, device=device)
    total = torch.zeros(GAMES, device=device)
    for _ in range(EVAL_STEPS):
        logits = model(states[:, -K:], actions[:, -K:], rtgs[:, -K:], timesteps[:, -K:])[:, -1]
        a = torch.multinomial(F.softmax(logits, dim=-1), 1)
        actions[:, -1:] = a
        reward = (torch.rand(GAMES, 1, device=device) < 0.1).float()
        total += reward.squeeze(1)
        frame = torch.randint(0, 256, (GAMES, 1, 4, 84, 84), dtype=torch.uint8, device=device)
        states = torch.cat([states, frame], dim=1)
        rtgs = torch.cat([rtgs, (rtgs[:, -1] - reward).unsqueeze(1)], dim=1)
        actions = torch.cat([actions, torch.zeros(GAMES, 1, dtype=torch.long, device=device)], dim=1)
        timesteps = torch.cat([timesteps, timesteps[:, -1:] + 1], dim=1)
print(f"eval mean return {total.mean().item():.3f}")
report("rollout eval")

# variant: left-padded trajectories, SDPA with a boolean causal-and-padding mask, bf16 autocast, fused AdamW
del opt, sched
for blk in model.blocks:
    blk.attn.use_sdpa = True
opt = configure_optimizers(model, fused=amp)
model.train()
T3 = 3 * K
causal = torch.tril(torch.ones(T3, T3, dtype=torch.bool, device=device))
eye = torch.eye(T3, dtype=torch.bool, device=device)
for step in range(2):
    lengths = torch.tensor([random.randint(K // 3, K) for _ in range(BATCH2)], device=device)
    valid = torch.arange(K, device=device)[None, :] >= (K - lengths)[:, None]  # (B, K) left padding
    key_valid = valid.repeat_interleave(3, dim=1)
    attn_mask = ((causal[None] & key_valid[:, None, :]) | eye[None]).unsqueeze(1)  # (B, 1, 3K, 3K)
    states, actions, rtgs, ts = batch(BATCH2)
    states = states * valid[:, :, None, None, None]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(states, actions, rtgs, ts, attn_mask)
    targets = actions.masked_fill(~valid, -100)
    loss = F.cross_entropy(logits.float().reshape(-1, ACTIONS), targets.reshape(-1), ignore_index=-100)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(f"padded sdpa step {step} loss {loss.item():.4f}")
report("padded sdpa bf16")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
