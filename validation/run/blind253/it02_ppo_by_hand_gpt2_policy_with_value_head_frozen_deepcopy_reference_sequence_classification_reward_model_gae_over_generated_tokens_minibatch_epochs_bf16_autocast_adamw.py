"""PPO for a language model written by hand, as nanoRLHF or TRL's old PPOTrainer do it: a GPT-2 policy
from its config (768 wide, 4 layers, 12 heads, vocab 50,257, fp32 weights) with a scalar value head
(`nn.Linear(768, 1)` over the last hidden states, `output_hidden_states=True`), a frozen reference made
by `copy.deepcopy` before training, and a reward model `GPT2ForSequenceClassification` (num_labels 1,
2 layers, bf16, pad_token_id set so it pools the last non-pad position). Each step: 16 prompts of 64
ids, sampled rollouts with `generate()` in eval mode (`do_sample=True`, top_p 0.9, 96 new tokens with
min_new_tokens equal, eos disabled); old log-probabilities and values, reference log-probabilities
(no_grad, bf16 autocast, `gather` of log_softmax), the reward model's score on the last token plus a
per-token KL penalty, GAE (gamma 1, lambda 0.95) by a reversed Python loop over the 96 generated
positions, whitened advantages; then 2 PPO epochs over 2 minibatches of 8 (bf16 autocast, clipped
policy and value losses, AdamW over the policy and the value head); 2 steps. Then `empty_cache()`
and a greedy evaluation rollout scored by the reward model.

Sampled ids depend on values; shapes do not. 4 phases."""

import copy

import torch
import torch.nn as nn
from transformers import GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel

torch.manual_seed(2532)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


V, P, N, NEW, MB = 50257, 64, 16, 96, 8
GAMMA, LAM, CLIP, VCLIP, KL = 1.0, 0.95, 0.2, 0.2, 0.05
cfg = GPT2Config(
    vocab_size=V,
    n_positions=512,
    n_embd=768,
    n_layer=4,
    n_head=12,
    bos_token_id=50256,
    eos_token_id=50256,
    pad_token_id=50256,
)
policy = GPT2LMHeadModel(cfg).cuda()
value_head = nn.Linear(768, 1).cuda()
ref = copy.deepcopy(policy).eval().requires_grad_(False)
rm_cfg = GPT2Config(
    vocab_size=V, n_positions=512, n_embd=768, n_layer=2, n_head=12, num_labels=1, pad_token_id=50256
)
reward_model = GPT2ForSequenceClassification(rm_cfg).to("cuda", torch.bfloat16).eval()
opt = torch.optim.AdamW(list(policy.parameters()) + list(value_head.parameters()), lr=1e-5)
report("load_policy_ref_reward")


def forward_lp_v(m, seqs, with_value):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = m(input_ids=seqs, output_hidden_states=with_value, use_cache=False)
        logits = out.logits[:, P - 1 : -1].float()
        values = value_head(out.hidden_states[-1][:, P - 1 : -1]).squeeze(-1).float() if with_value else None
    lp = logits.log_softmax(-1).gather(-1, seqs[:, P:].unsqueeze(-1)).squeeze(-1)
    return lp, values


gen = torch.Generator(device="cuda").manual_seed(2532)
for step in range(2):
    prompts = torch.randint(0, V - 1, (N, P), device="cuda", generator=gen)
    policy.eval()
    with torch.no_grad():
        seqs = policy.generate(
            input_ids=prompts,
            attention_mask=torch.ones_like(prompts),
            do_sample=True,
            top_p=0.9,
            top_k=0,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            eos_token_id=None,
            pad_token_id=50256,
        )
        old_lp, old_v = forward_lp_v(policy, seqs, True)
        ref_lp, _ = forward_lp_v(ref, seqs, False)
        score = reward_model(input_ids=seqs).logits.squeeze(-1).float()
        rewards = -KL * (old_lp - ref_lp)
        rewards[:, -1] += score
        adv = torch.zeros_like(rewards)
        last = torch.zeros(N, device="cuda")
        for t in reversed(range(NEW)):
            nxt = old_v[:, t + 1] if t + 1 < NEW else torch.zeros(N, device="cuda")
            delta = rewards[:, t] + GAMMA * nxt - old_v[:, t]
            last = delta + GAMMA * LAM * last
            adv[:, t] = last
        returns = adv + old_v
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)

    policy.train()
    for epoch in range(2):
        for idx in torch.randperm(N, device="cuda").split(MB):
            lp, v = forward_lp_v(policy, seqs[idx], True)
            ratio = torch.exp(lp - old_lp[idx])
            pg = torch.max(-adv[idx] * ratio, -adv[idx] * ratio.clamp(1 - CLIP, 1 + CLIP)).mean()
            v_clip = old_v[idx] + (v - old_v[idx]).clamp(-VCLIP, VCLIP)
            vf = 0.5 * torch.max((v - returns[idx]) ** 2, (v_clip - returns[idx]) ** 2).mean()
            loss = pg + 0.1 * vf
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    del seqs, old_lp, old_v, ref_lp, score, rewards, adv, last, returns, lp, v, ratio, pg, v_clip, vf, loss
report("ppo_rollout_gae_update_x2")

torch.cuda.empty_cache()
report("after_empty_cache")

policy.eval()
with torch.no_grad():
    prompts = torch.randint(0, V - 1, (32, P), device="cuda", generator=gen)
    seqs = policy.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=False,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        eos_token_id=None,
        pad_token_id=50256,
    )
    score = reward_model(input_ids=seqs).logits.float().mean()
del seqs, score
report("greedy_eval_scored")
