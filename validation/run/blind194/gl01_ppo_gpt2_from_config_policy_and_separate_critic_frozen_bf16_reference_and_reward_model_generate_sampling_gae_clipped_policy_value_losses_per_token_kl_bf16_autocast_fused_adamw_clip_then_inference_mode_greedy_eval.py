"""PPO for a language model in the style of TRL's PPOTrainer (policy + separate critic in one wrapper), with
every model a GPT-2 small built from GPT2Config (12 layers, 768 wide, 12 heads, 50,257-token vocabulary;
random init, nothing downloaded).

Models: the policy (GPT2LMHeadModel, fp32 weights), a frozen reference policy (a deepcopy of the policy cast
to bfloat16, eval, requires_grad off), a critic (GPT2Model + Linear(768, 1) value head, fp32) and a frozen
reward model (GPT2ForSequenceClassification, num_labels=1, pad_token_id = eos, cast to bfloat16). Policy and
critic are trained together by one fused AdamW (lr 1e-5, eps 1e-5) with clip_grad_norm_ 1.0 under bf16
autocast.

Phases: (0) model building and the rollout: 64 prompts of 64 random tokens, `generate()` with do_sample
(top_k 0, temperature 0.7, 48 new tokens, min_new_tokens = max_new_tokens so no early stop) under no_grad
and bf16 autocast; (1) scoring under no_grad: policy and reference log-probs of the response tokens
(log_softmax + gather in fp32), critic values, the reward model's score of the last token, per-token KL
penalty (beta 0.05) plus the score on the last token, GAE (gamma 1, lambda 0.95) by a reversed loop,
whitened advantages; (2) PPO update: 2 epochs over 4 shuffled minibatches of 16, clipped policy ratio
(0.2), clipped value loss (0.2, vf_coef 0.1), entropy logged; (3) a second rollout + scoring + one PPO
epoch (the steady state); (4) evaluation under torch.inference_mode: greedy generate() of 48 tokens at
batch 128 and the reward model's scores. 5 phases."""

import copy
import os

import torch
import torch.nn as nn
from transformers import GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel, GPT2Model

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19401)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    cfg = GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=256, bos_token_id=999, eos_token_id=999
    )
    B, P, R, MB, EVAL_B = 8, 16, 8, 4, 8
else:
    cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
    B, P, R, MB, EVAL_B = 64, 64, 48, 16, 128
cfg.pad_token_id = cfg.eos_token_id
BETA, GAMMA, LAM, CLIP, VF_CLIP, VF_COEF = 0.05, 1.0, 0.95, 0.2, 0.2, 0.1


class Critic(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.backbone = GPT2Model(config)
        self.value_head = nn.Linear(config.n_embd, 1)

    def forward(self, input_ids, attention_mask):
        h = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.value_head(h).squeeze(-1)


class PolicyAndValue(nn.Module):
    def __init__(self, policy, critic):
        super().__init__()
        self.policy = policy
        self.critic = critic


policy = GPT2LMHeadModel(cfg).to(device)
critic = Critic(cfg).to(device)
ref = copy.deepcopy(policy).to(torch.bfloat16).eval().requires_grad_(False)
rm_cfg = copy.deepcopy(cfg)
rm_cfg.num_labels = 1
rm = GPT2ForSequenceClassification(rm_cfg)
rm = rm.to(device, torch.bfloat16).eval().requires_grad_(False)
wrapper = PolicyAndValue(policy, critic)
opt = torch.optim.AdamW(wrapper.parameters(), lr=1e-5, eps=1e-5, fused=amp)
print(f"policy params {sum(p.numel() for p in policy.parameters())}")


def response_logprobs(model, seq, mask, temperature):
    logits = model(input_ids=seq, attention_mask=mask).logits[:, P - 1 : -1].float() / temperature
    logp = logits.log_softmax(-1)
    return logp.gather(-1, seq[:, P:, None]).squeeze(-1), logits


def rollout():
    prompts = torch.randint(0, cfg.vocab_size, (B, P), device=device)
    pmask = torch.ones_like(prompts)
    policy.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        seq = policy.generate(
            input_ids=prompts,
            attention_mask=pmask,
            do_sample=True,
            top_k=0,
            temperature=0.7,
            max_new_tokens=R,
            min_new_tokens=R,
            pad_token_id=cfg.eos_token_id,
        )
    return seq


def score(seq):
    mask = torch.ones_like(seq)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logp, _ = response_logprobs(policy, seq, mask, 0.7)
        ref_logp, _ = response_logprobs(ref, seq, mask, 0.7)
        values = critic(seq, mask)[:, P - 1 : -1].float()
        rm_score = rm(input_ids=seq, attention_mask=mask).logits.squeeze(-1).float()
    kl = logp - ref_logp
    rewards = -BETA * kl
    rewards[:, -1] += rm_score
    adv = torch.zeros_like(rewards)
    last = torch.zeros(B, device=device)
    for t in reversed(range(R)):
        nxt = values[:, t + 1] if t + 1 < R else torch.zeros(B, device=device)
        delta = rewards[:, t] + GAMMA * nxt - values[:, t]
        last = delta + GAMMA * LAM * last
        adv[:, t] = last
    returns = adv + values
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    return logp, values, returns, adv, rm_score, kl.sum(-1).mean()


def ppo_epochs(seq, old_logp, old_values, returns, adv, epochs):
    policy.train()
    critic.train()
    mask = torch.ones_like(seq)
    stats = []
    for _ in range(epochs):
        perm = torch.randperm(B, device=device)
        for i in range(0, B, MB):
            idx = perm[i : i + MB]
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                logp, logits = response_logprobs(policy, seq[idx], mask[idx], 0.7)
                vpred = critic(seq[idx], mask[idx])[:, P - 1 : -1].float()
            vclip = old_values[idx] + (vpred - old_values[idx]).clamp(-VF_CLIP, VF_CLIP)
            vf_loss = 0.5 * torch.max((vpred - returns[idx]) ** 2, (vclip - returns[idx]) ** 2).mean()
            ratio = torch.exp(logp - old_logp[idx])
            pg_loss = torch.max(-adv[idx] * ratio, -adv[idx] * ratio.clamp(1 - CLIP, 1 + CLIP)).mean()
            loss = pg_loss + VF_COEF * vf_loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(wrapper.parameters(), 1.0)
            opt.step()
            with torch.no_grad():
                p = logits.softmax(-1)
                entropy = (torch.logsumexp(logits, -1) - (p * logits).sum(-1)).mean()
            stats.append((pg_loss.item(), vf_loss.item(), entropy.item()))
    return stats[-1]


seq = rollout()
print(f"rollout {tuple(seq.shape)}")
if device == "cuda":
    print(f"rollout peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

old_logp, old_values, returns, adv, rm_score, kl = score(seq)
print(f"score mean {rm_score.mean().item():.4f} kl {kl.item():.4f}")
if device == "cuda":
    print(f"scoring peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

pg, vf, ent = ppo_epochs(seq, old_logp, old_values, returns, adv, 2)
print(f"ppo pg {pg:.4f} vf {vf:.4f} entropy {ent:.4f}")
if device == "cuda":
    print(f"ppo peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

seq = rollout()
old_logp, old_values, returns, adv, rm_score, kl = score(seq)
pg, vf, ent = ppo_epochs(seq, old_logp, old_values, returns, adv, 1)
print(f"iteration 2 score {rm_score.mean().item():.4f} pg {pg:.4f} vf {vf:.4f}")
if device == "cuda":
    print(f"iteration 2 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

policy.eval()
prompts = torch.randint(0, cfg.vocab_size, (EVAL_B, P), device=device)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    out = policy.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=False,
        max_new_tokens=R,
        min_new_tokens=R,
        pad_token_id=cfg.eos_token_id,
    )
    eval_scores = rm(input_ids=out, attention_mask=torch.ones_like(out)).logits.float()
print(f"eval mean score {eval_scores.mean().item():.4f}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
