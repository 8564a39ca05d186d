"""Group Relative Policy Optimization (DeepSeekMath, Shao et al. 2024) written by hand the way TRL's
GRPOTrainer computes it, over an HF LlamaForCausalLM built from SmolLM-135M's config (576 wide, 30
layers, 9 heads with 3 KV heads, 1,536 MLP, a 49,152-token vocabulary, tied embeddings). The policy
keeps fp32 weights and runs under bf16 autocast; torch.optim.AdamW with foreach (lr 1e-6, weight decay
0.1, betas 0.9/0.99); the reference model is a second Llama in bf16 weights with the policy's
state_dict, frozen. Each step: 8 prompts of 128 tokens, `policy.generate()` under no_grad with
do_sample, temperature 0.9, top_k 0, num_return_sequences=8 and max_new_tokens 96, the end of
sequence disabled in the generation config (eos_token_id None) so every completion is 96 tokens
(64 x 224 sequences); a rule-based reward over the completion tokens, advantages normalised within
each group of 8; the reference's per-token log-probs under no_grad through `logits_to_keep`; then two
micro-batches of 32 sequences each take the policy's per-token log-probs by TRL's
selective_log_softmax (log_softmax row by row for bf16 logits, then a gather), the clipped ratio
against its detached self, the k3 KL estimate exp(ref - logp) - (ref - logp) - 1 with beta 0.04, the
masked per-sequence mean, the loss scaled by 1/2 and backward; clip_grad_norm_ 1.0 and one optimizer
step. 2 steps, each a rollout phase (generation, rewards, reference log-probs) and a training phase,
after the models' phase; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16302)
if SMALL:
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    N_PROMPTS, G, PROMPT_LEN, NEW, MICRO = 2, 4, 8, 8, 4
else:
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
    N_PROMPTS, G, PROMPT_LEN, NEW, MICRO = 8, 8, 128, 96, 32
device = "cuda" if torch.cuda.is_available() else "cpu"
BETA, EPS, TEMPERATURE, STEPS = 0.04, 0.2, 0.9, 2

policy = LlamaForCausalLM(config).to(device)
policy.generation_config.eos_token_id = None
policy.generation_config.pad_token_id = 0
ref_model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
ref_model.load_state_dict(policy.state_dict())
ref_model.requires_grad_(False)
ref_model.eval()
optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6, betas=(0.9, 0.99), weight_decay=0.1, foreach=True)


def selective_log_softmax(logits, index):
    if logits.dtype in [torch.float32, torch.float64]:
        selected_logits = torch.gather(logits, dim=-1, index=index.unsqueeze(-1)).squeeze(-1)
        logsumexp_values = torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])
        return selected_logits - logsumexp_values
    per_token_logps = []
    for row_logits, row_labels in zip(logits, index, strict=True):
        row_logps = F.log_softmax(row_logits, dim=-1)
        per_token_logps.append(row_logps.gather(dim=-1, index=row_labels.unsqueeze(-1)).squeeze(-1))
    return torch.stack(per_token_logps)


def get_per_token_logps(model, input_ids, attention_mask, logits_to_keep):
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep + 1
    ).logits
    logits = logits[:, :-1, :]
    input_ids = input_ids[:, -logits_to_keep:]
    logits = logits[:, -logits_to_keep:]
    logits = logits / TEMPERATURE
    return selective_log_softmax(logits, input_ids)


def reward_fn(completion_ids):
    # a rule-based reward: the share of tokens from a "format" range, plus a bonus for a closing token
    in_range = ((completion_ids % 97) < 13).float().mean(dim=1)
    closing = (completion_ids[:, -1] % 5 == 0).float()
    return in_range + 0.5 * closing


def mark():
    if device == "cuda":
        torch.cuda.synchronize()
        return f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    return ""


if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(STEPS):
    prompt_ids = torch.randint(3, config.vocab_size, (N_PROMPTS, PROMPT_LEN), device=device)
    prompt_mask = torch.ones_like(prompt_ids)
    policy.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        prompt_completion_ids = policy.generate(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            do_sample=True,
            temperature=TEMPERATURE,
            top_k=0,
            top_p=1.0,
            max_new_tokens=NEW,
            num_return_sequences=G,
        )
    prompt_len = prompt_ids.size(1)
    completion_ids = prompt_completion_ids[:, prompt_len:]
    completion_mask = torch.ones_like(completion_ids, dtype=torch.int)
    attention_mask = torch.cat([prompt_mask.repeat_interleave(G, dim=0), completion_mask], dim=1)
    logits_to_keep = completion_ids.size(1)
    with torch.no_grad():
        ref_per_token_logps = torch.cat(
            [
                get_per_token_logps(
                    ref_model,
                    prompt_completion_ids[i : i + MICRO],
                    attention_mask[i : i + MICRO],
                    logits_to_keep,
                )
                for i in range(0, prompt_completion_ids.size(0), MICRO)
            ]
        )
    rewards = reward_fn(completion_ids)
    mean_grouped = rewards.view(-1, G).mean(dim=1).repeat_interleave(G, dim=0)
    std_grouped = rewards.view(-1, G).std(dim=1).repeat_interleave(G, dim=0)
    advantages = (rewards - mean_grouped) / (std_grouped + 1e-4)
    print(f"rollout {step} {tuple(prompt_completion_ids.shape)} reward {rewards.mean().item():.4f} {mark()}")
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()

    policy.train()
    n_micro = prompt_completion_ids.size(0) // MICRO
    for i in range(0, prompt_completion_ids.size(0), MICRO):
        ids, am = prompt_completion_ids[i : i + MICRO], attention_mask[i : i + MICRO]
        cmask = completion_mask[i : i + MICRO]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            per_token_logps = get_per_token_logps(policy, ids, am, logits_to_keep)
        ref = ref_per_token_logps[i : i + MICRO]
        per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
        old_per_token_logps = per_token_logps.detach()
        coef_1 = torch.exp(per_token_logps - old_per_token_logps)
        coef_2 = torch.clamp(coef_1, 1 - EPS, 1 + EPS)
        adv = advantages[i : i + MICRO].unsqueeze(1)
        per_token_loss = -torch.min(coef_1 * adv, coef_2 * adv) + BETA * per_token_kl
        loss = ((per_token_loss * cmask).sum(dim=1) / cmask.sum(dim=1).clamp(min=1.0)).mean()
        (loss / n_micro).backward()
        mean_kl = ((per_token_kl * cmask).sum() / cmask.sum()).item()
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"train {step} loss {loss.item():.4f} kl {mean_kl:.5f} grad_norm {grad_norm.item():.3f} {mark()}")
    if device == "cuda" and step < STEPS - 1:
        torch.cuda.reset_peak_memory_stats()
    del per_token_logps, per_token_kl, per_token_loss, loss, coef_1, coef_2, ref_per_token_logps
