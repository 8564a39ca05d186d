"""PPO for RLHF written by hand (the loop of TRL's old PPOTrainer / the "N implementation details of RLHF"
blog), no TRL: a Qwen2ForCausalLM from a small Qwen2Config (1024 wide, 8 layers, GQA 16/4, qkv bias,
tied embeddings), bf16, with a LoRA policy adapter (r 16 on q/k/v/o); the frozen reference policy is the
same model under peft's disable_adapter() context; the critic is a fp32 linear value head on the policy's
last hidden state; the reward is a frozen linear "reward head" read at the last token of the reference
model's hidden states.

Per PPO iteration: rollouts by generate() (sampling, top_p 0.95, 8 left-padded prompts x 2 samples, exactly
64 new tokens); under no_grad, the old policy's and the reference's per-token log-probs of the response
(log_softmax + gather over the 32k vocabulary) and the old values; per-token rewards = -0.05 * (logp_old -
logp_ref), plus the score at the last token; GAE (gamma 1, lambda 0.95) in a reversed Python loop over the
64 steps, whitened advantages; then 2 epochs over 2 minibatches of the clipped surrogate (eps 0.2) plus
the clipped value loss (coefficient 0.1), bf16 autocast, AdamW on adapter + value head. Two iterations.

Phases: 0 model, adapter and heads built; 1 first iteration's rollout and scoring; 2 first iteration's
PPO updates; 3 second iteration (rollout, scoring and updates)."""

import os

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3184)
if SMALL:
    config = Qwen2Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    G, K, PL, T, MB = 2, 2, 12, 8, 2
else:
    config = Qwen2Config(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=2048,
    )
    G, K, PL, T, MB = 8, 2, 160, 64, 8
config.tie_word_embeddings = True
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


base = Qwen2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
policy = get_peft_model(
    base,
    LoraConfig(
        r=16, lora_alpha=32, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]
    ),
)
for p in policy.parameters():
    if p.requires_grad:
        p.data = p.data.float()
value_head = torch.nn.Linear(config.hidden_size, 1).to(device)
reward_head = torch.nn.Linear(config.hidden_size, 1, bias=False).to(device).requires_grad_(False)
params = [p for p in policy.parameters() if p.requires_grad] + list(value_head.parameters())
optimizer = torch.optim.AdamW(params, lr=1e-5, eps=1e-5)
report("built")


def forward_logp_values(model, seqs, attn, with_values):
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=seqs, attention_mask=attn, output_hidden_states=True)
    logits = out.logits[:, PL - 1 : -1].float()
    logp = torch.gather(F.log_softmax(logits, dim=-1), 2, seqs[:, PL:, None]).squeeze(-1)
    hidden = out.hidden_states[-1][:, PL - 1 : -1].float()
    values = value_head(hidden).squeeze(-1) if with_values else None
    return logp, values, out.hidden_states[-1][:, -1].float()


def iteration(it):
    prompts = torch.randint(3, config.vocab_size, (G, PL))
    plen = torch.linspace(PL // 2, PL, G).long()
    pattn = (torch.arange(PL)[None, :] >= (PL - plen)[:, None]).long()
    prompts = prompts * pattn
    policy.eval()
    with torch.no_grad():
        seqs = policy.generate(
            input_ids=prompts.to(device),
            attention_mask=pattn.to(device),
            do_sample=True,
            top_p=0.95,
            top_k=0,
            num_return_sequences=K,
            max_new_tokens=T,
            min_new_tokens=T,
            pad_token_id=0,
            eos_token_id=2,
        )
        attn = torch.cat(
            [pattn.repeat_interleave(K, 0).to(device), torch.ones(G * K, T, dtype=torch.long, device=device)],
            1,
        )
        old_logp, old_values, _ = forward_logp_values(policy, seqs, attn, True)
        with policy.disable_adapter():
            ref_logp, _, last_h = forward_logp_values(policy, seqs, attn, False)
        score = reward_head(last_h).squeeze(-1)
        rewards = -0.05 * (old_logp - ref_logp)
        rewards[:, -1] += score
        adv_rev, last = [], torch.zeros(G * K, device=device)
        for t in reversed(range(T)):
            next_v = old_values[:, t + 1] if t + 1 < T else torch.zeros_like(last)
            delta = rewards[:, t] + next_v - old_values[:, t]
            last = delta + 0.95 * last
            adv_rev.append(last)
        advantages = torch.stack(adv_rev[::-1], dim=1)
        returns = advantages + old_values
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    print(f"iter {it} score {score.mean().item():.3f} kl {(old_logp - ref_logp).sum(1).mean().item():.4f}")
    if it == 0:
        report("rollout0")

    policy.train()
    for epoch in range(2):
        perm = torch.randperm(G * K, device=device)
        for start in range(0, G * K, MB):
            idx = perm[start : start + MB]
            logp, values, _ = forward_logp_values(policy, seqs[idx], attn[idx], True)
            ratio = torch.exp(logp - old_logp[idx])
            pg = torch.max(-advantages[idx] * ratio, -advantages[idx] * ratio.clamp(0.8, 1.2)).mean()
            v_clip = old_values[idx] + (values - old_values[idx]).clamp(-0.2, 0.2)
            vf = 0.5 * torch.max((values - returns[idx]) ** 2, (v_clip - returns[idx]) ** 2).mean()
            loss = pg + 0.1 * vf
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        print(f"iter {it} epoch {epoch} loss {loss.item():.4f}")
    if it == 0:
        report("ppo0")


for it in range(2):
    iteration(it)
report("iter1")
