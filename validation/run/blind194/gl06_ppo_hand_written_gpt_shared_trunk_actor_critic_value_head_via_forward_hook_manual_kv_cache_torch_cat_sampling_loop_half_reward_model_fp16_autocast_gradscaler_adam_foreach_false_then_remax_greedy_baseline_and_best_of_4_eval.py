"""PPO for a hand-written GPT with a shared trunk (actor and critic share all 12 blocks; the value head
reads the last block's output through a forward hook), sampling with a hand-written KV cache grown by
torch.cat, then ReMax (Li et al. 2023: REINFORCE with the greedy rollout's reward as the baseline) and a
best-of-4 evaluation.

Policy: GPT-2-small-like (learned positions up to 512, 12 pre-LN blocks of width 768 with 12 heads through
F.scaled_dot_product_attention, GELU MLP 3,072, tied lm_head over 50,304 tokens) plus Linear(768, 1)
value head; fp32 weights under fp16 autocast with torch.amp.GradScaler, Adam(foreach=False, lr 1e-5),
unscale_ + clip_grad_norm_ 0.5. Reward model: the same architecture at 6 layers with a scalar head on the
last token, cast by `.half()`, frozen.

Phases: (0) building and the rollout: 48 prompts of 96 tokens, prefill then 64 sampled tokens (temperature
1.0, top-k 40 by topk + scatter) with the per-layer key/value caches concatenated each step, under no_grad
and fp16 autocast; (1) scoring (policy log-probs and values in one forward, the hook capturing the trunk's
output; the reward model in fp16), KL to the initial policy's log-probs (the rollout's own log-probs at
step 0) as a per-token penalty of 0.02, GAE (gamma 0.99, lambda 0.95); (2) PPO: 3 epochs over 2
minibatches of 24 with clipped ratio 0.2, value loss 0.5 and entropy bonus 0.01; (3) ReMax: a sampled and
a greedy rollout of the same 48 prompts, loss -(r_sample - r_greedy) * sum logp, two steps; (4) best-of-4
under torch.inference_mode: 16 prompts x 4 samples of 64 tokens, the reward model picks the best of each
group, the winners gathered to the host. 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19406)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    V, D, H, LAYERS, RM_LAYERS, BLOCK, B, P, R, MB, BON = 1000, 64, 4, 2, 1, 64, 8, 8, 8, 4, 4
else:
    V, D, H, LAYERS, RM_LAYERS, BLOCK, B, P, R, MB, BON = 50304, 768, 12, 12, 6, 512, 48, 96, 64, 24, 16
GAMMA, LAM, KL_COEF, CLIP = 0.99, 0.95, 0.02, 0.2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)

    def forward(self, x, cache=None):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, -1)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        if cache is not None:
            if cache[0] is not None:
                k = torch.cat([cache[0], k], 2)
                v = torch.cat([cache[1], v], 2)
            cache[0], cache[1] = k, v
        a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, scalar_head=False):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(BLOCK, D)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, 1) if scalar_head else None
        self.apply(self._init)
        for blk in self.blocks:
            nn.init.normal_(blk.proj.weight, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, ids, caches=None, start=0):
        pos = torch.arange(start, start + ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for i, blk in enumerate(self.blocks):
            x = blk(x, None if caches is None else caches[i])
        x = self.ln_f(x)
        if self.head is not None:
            return self.head(x[:, -1]).squeeze(-1)
        return F.linear(x, self.wte.weight)


policy = GPT(LAYERS).to(device)
value_head = nn.Linear(D, 1).to(device)
trunk_out = {}
policy.ln_f.register_forward_hook(lambda m, i, o: trunk_out.__setitem__("h", o))
rm = GPT(RM_LAYERS, scalar_head=True).to(device).half().eval().requires_grad_(False)
params = list(policy.parameters()) + list(value_head.parameters())
opt = torch.optim.Adam(params, lr=1e-5, foreach=False)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
print(f"policy params {sum(p.numel() for p in policy.parameters())}")


@torch.no_grad()
def rollout(prompts, greedy=False):
    policy.eval()
    caches = [[None, None] for _ in policy.blocks]
    ids = prompts
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        logits = policy(prompts, caches)[:, -1]
        for t in range(R):
            logits = logits.float()
            if greedy:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                top, idx = logits.topk(40, -1)
                masked = torch.full_like(logits, float("-inf")).scatter(-1, idx, top)
                nxt = torch.multinomial(masked.softmax(-1), 1)
            ids = torch.cat([ids, nxt], 1)
            if t < R - 1:
                logits = policy(nxt, caches, start=ids.shape[1] - 1)[:, -1]
    return ids


def reward(seq):
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        return rm(seq).float()


def logps_values(seq):
    logits = policy(seq)[:, P - 1 : -1].float()
    values = value_head(trunk_out["h"][:, P - 1 : -1]).squeeze(-1).float()
    logp_all = logits.log_softmax(-1)
    logp = logp_all.gather(-1, seq[:, P:, None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, values, entropy


prompts = torch.randint(0, V, (B, P), device=device)
seq = rollout(prompts)
print(f"rollout {tuple(seq.shape)}")
if device == "cuda":
    print(f"rollout peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    old_logp, old_values, _ = logps_values(seq)
init_logp = old_logp.clone()
score = reward(seq)
rewards = -KL_COEF * (old_logp - init_logp)
rewards[:, -1] += score
adv = torch.zeros_like(rewards)
running = torch.zeros(B, device=device)
for t in reversed(range(R)):
    nv = old_values[:, t + 1] if t + 1 < R else torch.zeros_like(running)
    running = rewards[:, t] + GAMMA * nv - old_values[:, t] + GAMMA * LAM * running
    adv[:, t] = running
returns = adv + old_values
adv = (adv - adv.mean()) / (adv.std() + 1e-8)
print(f"score {score.mean().item():.4f}")
if device == "cuda":
    print(f"scoring peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

policy.train()
for epoch in range(3):
    perm = torch.randperm(B, device=device)
    for i in range(0, B, MB):
        idx = perm[i : i + MB]
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            logp, values, entropy = logps_values(seq[idx])
        ratio = (logp - old_logp[idx]).exp()
        pg = torch.max(-adv[idx] * ratio, -adv[idx] * ratio.clamp(1 - CLIP, 1 + CLIP)).mean()
        vf = 0.5 * (values - returns[idx]).pow(2).mean()
        loss = pg + 0.5 * vf - 0.01 * entropy.mean()
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        scaler.step(opt)
        scaler.update()
    print(f"ppo epoch {epoch} loss {loss.item():.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"ppo peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(2):
    prompts = torch.randint(0, V, (B, P), device=device)
    sampled = rollout(prompts)
    greedy = rollout(prompts, greedy=True)
    adv_remax = reward(sampled) - reward(greedy)
    policy.train()
    total = 0.0
    for i in range(0, B, MB):
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            logp, _, _ = logps_values(sampled[i : i + MB])
        loss = -(adv_remax[i : i + MB] * logp.sum(-1)).mean() * MB / B
        scaler.scale(loss).backward()
        total += loss.item()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, 0.5)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"remax step {step} loss {total:.4f}")
if device == "cuda":
    print(f"remax peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    prompts = torch.randint(0, V, (BON, P), device=device).repeat_interleave(4, 0)
    cands = rollout(prompts)
    scores = reward(cands).view(BON, 4)
    best = scores.argmax(1)
    winners = cands.view(BON, 4, -1)[torch.arange(BON, device=device), best].cpu()
print(f"best-of-4 winners {tuple(winners.shape)} mean best score {scores.max(1).values.mean().item():.4f}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
