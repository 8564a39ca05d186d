"""Direct Preference Optimization on a hand-written GPT, with the allocator driven by the training script:

- the policy (8 pre-LN blocks, d 768, 12 heads, vocab 32,000, tied head) trains in fp32 under bf16 autocast
  with `AdamW(foreach=True)`; the frozen reference is a bf16 copy (`copy.deepcopy(...).to(torch.bfloat16)`,
  `requires_grad_(False)`) whose no_grad forward runs inside `with torch.cuda.use_mem_pool(ref_pool):` on a
  `torch.cuda.MemPool`, so its activations stay out of the training pool;
- an EMA of the policy lives on a side stream: before making it the script reserves the side stream's cache
  with `torch.cuda.caching_allocator_alloc(nbytes, stream=ema_stream)` / `caching_allocator_delete`, clones the
  parameters there, and after each optimizer step the side stream waits on the compute stream and runs
  `torch._foreach_lerp_`;
- every 4 steps the script reads `torch.cuda.memory_stats()` and calls `torch.cuda.empty_cache()` when the
  idle cache (`reserved_bytes.all.current - active_bytes.all.current`) is more than 60% of the reserved
  bytes (printed).

Each batch holds 4 prompts with a chosen and a rejected answer; prompt and answer lengths are drawn on the host
(seeded `random.Random`: prompts 64-256, answers 32-384 tokens), padded on the right, with the loss masked to
the answer tokens; the DPO loss is `-logsigmoid(beta * ((pc - rc) - (pr - rr)))` with beta 0.1.

Phases: set-up (policy, reference, EMA); 24 DPO steps; `torch.cuda.memory._set_allocator_settings(
"roundup_power2_divisions:4")` after `empty_cache()`, then 16 DPO steps with answers up to 512 tokens; the reference
and its pool deleted, `empty_cache()`, and the EMA model scored under no_grad on 8 preference batches (reward
accuracy). 4 phases. Sizes come from the host RNG and the allocator's own figures."""

import copy
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2955)
rng = random.Random(29550)
V, D, H, L, BETA = 32000, 768, 12, 8, 0.1


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(approximate="tanh"), nn.Linear(4 * D, D))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.attn(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(1024, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def sequence_logprob(model, ids, mask):
    logits = model(ids[:, :-1]).float()
    lp = torch.gather(logits.log_softmax(-1), 2, ids[:, 1:, None]).squeeze(2)
    return (lp * mask[:, 1:]).sum(1)


def pair_batch(max_answer):
    rows, masks = [], []
    for _ in range(4):
        p = rng.randint(64, 256)
        prompt = torch.randint(0, V, (p,))
        for _ in range(2):
            a = rng.randint(32, max_answer)
            rows.append(torch.cat([prompt, torch.randint(0, V, (a,))]))
            masks.append(torch.cat([torch.zeros(p), torch.ones(a)]))
    t = max(len(r) for r in rows)
    ids = torch.zeros(8, t, dtype=torch.long)
    mask = torch.zeros(8, t)
    for i, (r, m) in enumerate(zip(rows, masks)):
        ids[i, : len(r)] = r
        mask[i, : len(m)] = m
    return ids.cuda(), mask.cuda()


policy = GPT().cuda()
reference = copy.deepcopy(policy).to(torch.bfloat16).requires_grad_(False).eval()
ref_pool = torch.cuda.MemPool()
opt = torch.optim.AdamW(policy.parameters(), lr=5e-6, weight_decay=0.0, foreach=True)
ema_stream = torch.cuda.Stream()
nbytes = sum(p.numel() * p.element_size() for p in policy.parameters())
ptr = torch.cuda.caching_allocator_alloc(nbytes, stream=ema_stream)
torch.cuda.caching_allocator_delete(ptr)
ema_stream.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(ema_stream):
    ema = [p.detach().clone() for p in policy.parameters()]
torch.cuda.current_stream().wait_stream(ema_stream)
report("setup_policy_reference_ema")

step_count = 0


def dpo_steps(n, max_answer):
    global step_count
    policy.train()
    for _ in range(n):
        ids, mask = pair_batch(max_answer)
        with torch.no_grad(), torch.cuda.use_mem_pool(ref_pool), torch.autocast("cuda", dtype=torch.bfloat16):
            ref = sequence_logprob(reference, ids, mask)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            pol = sequence_logprob(policy, ids, mask)
        margin = (pol[0::2] - ref[0::2]) - (pol[1::2] - ref[1::2])
        loss = -F.logsigmoid(BETA * margin).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        ema_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(ema_stream):
            torch._foreach_lerp_(ema, [p.detach() for p in policy.parameters()], 0.01)
        torch.cuda.current_stream().wait_stream(ema_stream)
        loss_value = loss.item()
        del ids, mask, ref, pol, margin, loss
        step_count += 1
        if step_count % 4 == 0:
            stats = torch.cuda.memory_stats()
            idle = stats["reserved_bytes.all.current"] - stats["active_bytes.all.current"]
            if idle > 0.6 * stats["reserved_bytes.all.current"]:
                print(f"step {step_count}: loss {loss_value:.4f} idle cache {idle}, empty_cache")
                torch.cuda.empty_cache()


dpo_steps(24, 384)
report("dpo_24_steps_reference_in_mempool")

torch.cuda.empty_cache()
torch.cuda.memory._set_allocator_settings("roundup_power2_divisions:4")
dpo_steps(16, 512)
report("dpo_16_steps_longer_answers_roundup_power2_divisions_4")

del reference
del ref_pool
torch.cuda.empty_cache()
ema_model = GPT().cuda()
with torch.no_grad():
    for p, e in zip(ema_model.parameters(), ema):
        p.copy_(e)
ema_model.eval()
wins = torch.zeros((), device="cuda")
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(8):
        ids, mask = pair_batch(512)
        lp = sequence_logprob(ema_model, ids, mask)
        wins += (lp[0::2] > lp[1::2]).float().sum()
        del ids, mask, lp
print(f"ema reward accuracy {wins.item() / 32:.3f}")
report("reference_pool_released_ema_eval")
