"""One PPO iteration of RLHF done by hand on Hugging Face Llama models built from configs (random init, nothing
downloaded): rollout by generate, a scoring pass, GAE, clipped policy and value updates; then a greedy evaluation
and a second iteration with gradient checkpointing.

Models: the policy LlamaForCausalLM(LlamaConfig(hidden 1024, intermediate 2816, 8 layers, 16 heads with 8 key/value
heads, vocabulary 32,000, SDPA)) in fp32 with a value head (nn.Linear(1024, 1)) on its last hidden state
(output_hidden_states=True); the reference is a bf16 copy of the policy, frozen; the reward model is a
LlamaForSequenceClassification(num_labels 1, hidden 768, 6 layers) in bf16, frozen, pooling the last token.

Rollout: 16 random prompts of 128 tokens, policy.generate(max_new_tokens=128, min_new_tokens=128, do_sample=False,
KV cache) under bf16 autocast, so every response has 128 tokens. Scoring under torch.no_grad: the policy's
log-probabilities (log_softmax + gather) and values, the reference's log-probabilities, the reward model's score
on the whole sequence; per-token reward = -0.05 * (logp - ref_logp), plus the score on the last token; GAE
(gamma 1, lambda 0.95) by a reversed Python loop over the 128 positions; advantages whitened.

Update: 2 epochs over 2 minibatches of 8, clipped ratio loss (0.2) + 0.5 * clipped value loss, bf16 autocast,
torch.optim.AdamW(fused=True) lr 1e-6 over policy and value head, clip at 1.0.

Phases: the rollout; scoring and GAE; the PPO update; a greedy evaluation of 32 prompts (generate under
torch.inference_mode) scored by the reward model; a second iteration (rollout, scoring, update) with gradient
checkpointing (non-reentrant) on the policy during the update. 5 phases."""

import copy
import os

import torch
import torch.nn as nn
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2304)
if SMALL:
    pol = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    rm = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)
    VOCAB, PROMPT, NEW, ROLL, MB = 512, 16, 16, 4, 2
else:
    pol = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
               num_key_value_heads=8)
    rm = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=6, num_attention_heads=12,
              num_key_value_heads=12)
    VOCAB, PROMPT, NEW, ROLL, MB = 32000, 128, 128, 16, 8
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
PAD = 0


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


common = dict(vocab_size=VOCAB, pad_token_id=PAD, bos_token_id=1, eos_token_id=2, max_position_embeddings=1024,
              attn_implementation="sdpa")
policy = LlamaForCausalLM(LlamaConfig(**common, **pol)).to(device)
value_head = nn.Linear(pol["hidden_size"], 1).to(device)
reference = copy.deepcopy(policy).to(torch.bfloat16).eval().requires_grad_(False)
reward_model = LlamaForSequenceClassification(LlamaConfig(num_labels=1, **common, **rm)).to(device, torch.bfloat16)
reward_model.eval().requires_grad_(False)
print(f"policy {sum(p.numel() for p in policy.parameters()) / 1e6:.1f}M reward {sum(p.numel() for p in reward_model.parameters()) / 1e6:.1f}M")
params = list(policy.parameters()) + list(value_head.parameters())
opt = torch.optim.AdamW(params, lr=1e-6, weight_decay=0.0, fused=device == "cuda")


def rollout(n, mode=torch.no_grad):
    prompts = torch.randint(3, VOCAB, (n, PROMPT), device=device)
    policy.eval()
    with mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        seqs = policy.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=NEW,
                               min_new_tokens=NEW, do_sample=False, pad_token_id=PAD)
    return seqs


def logps_values(model, seqs, with_values):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        out = model(input_ids=seqs, output_hidden_states=with_values)
        logits = out.logits[:, PROMPT - 1 : -1].float()
        lp = logits.log_softmax(-1).gather(-1, seqs[:, PROMPT:].unsqueeze(-1)).squeeze(-1)
        values = value_head(out.hidden_states[-1][:, PROMPT - 1 : -1]).squeeze(-1).float() if with_values else None
    return lp, values


def score(seqs):
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        old_lp, old_values = logps_values(policy, seqs, True)
        ref_lp, _ = logps_values(reference, seqs, False)
        scores = reward_model(input_ids=seqs).logits.squeeze(-1).float()
    rewards = -0.05 * (old_lp - ref_lp)
    rewards[:, -1] += scores
    adv = torch.zeros_like(rewards)
    last = torch.zeros(seqs.shape[0], device=device)
    for t in reversed(range(NEW)):
        nxt = old_values[:, t + 1] if t + 1 < NEW else torch.zeros_like(last)
        delta = rewards[:, t] + nxt - old_values[:, t]
        last = delta + 0.95 * last
        adv[:, t] = last
    returns = adv + old_values
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    return old_lp, old_values, adv, returns, scores


def update(seqs, old_lp, old_values, adv, returns, epochs=2):
    policy.train()
    for _ in range(epochs):
        for idx in torch.randperm(seqs.shape[0], device=device).split(MB):
            lp, v = logps_values(policy, seqs[idx], True)
            ratio = torch.exp(lp - old_lp[idx])
            pg = torch.max(-adv[idx] * ratio, -adv[idx] * ratio.clamp(0.8, 1.2)).mean()
            v_clip = old_values[idx] + (v - old_values[idx]).clamp(-0.2, 0.2)
            vf = 0.5 * torch.max((v - returns[idx]) ** 2, (v_clip - returns[idx]) ** 2).mean()
            loss = pg + 0.5 * vf
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
    return loss.item()


seqs = rollout(ROLL)
print(f"rollout {tuple(seqs.shape)}")
report("rollout")
batch = score(seqs)
print(f"score mean {batch[4].mean().item():.4f}")
report("scoring")
print(f"ppo loss {update(seqs, *batch[:4]):.4f}")
report("ppo update")

seqs_eval = rollout(2 * ROLL, torch.inference_mode)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    eval_scores = reward_model(input_ids=seqs_eval).logits.float()
print(f"eval score {eval_scores.mean().item():.4f}")
report("eval")

policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
seqs = rollout(ROLL)
batch = score(seqs)
print(f"ppo2 loss {update(seqs, *batch[:4]):.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
