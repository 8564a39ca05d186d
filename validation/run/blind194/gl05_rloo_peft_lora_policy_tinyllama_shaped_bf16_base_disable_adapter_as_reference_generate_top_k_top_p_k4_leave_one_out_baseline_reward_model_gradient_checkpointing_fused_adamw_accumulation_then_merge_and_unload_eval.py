"""RLOO (REINFORCE leave-one-out, Ahmadian et al. 2024) with a LoRA policy from peft, in the manner of
TRL's RLOOTrainer with a peft_config: the base model with its adapter disabled is the reference policy,
so no second copy of the weights.

Policy: a LlamaForCausalLM shaped like TinyLlama-1.1B (22 layers, hidden 2,048, 32 heads with 4 key/value
heads, SwiGLU 5,632, 32,000-token vocabulary; random init from LlamaConfig), cast to bfloat16, wrapped by
get_peft_model with LoRA r 16, alpha 32, dropout 0.05 on q/k/v/o/gate/up/down (peft keeps the adapters in
fp32), gradient checkpointing (use_reentrant False) with `enable_input_require_grads()`. Reward model: a
LlamaForSequenceClassification (8 layers x 1,024, num_labels 1, pad id set) in bfloat16, frozen. Optimizer:
fused AdamW (lr 3e-5) over the LoRA parameters, clip_grad_norm_ 1.0, bf16 autocast.

Each iteration: 16 prompts of 128 random tokens, each sampled k = 4 times by `generate()` (do_sample,
top_k 50, top_p 0.9, 48 new tokens, min_new_tokens = max_new_tokens) under no_grad; the reward model's
score; per-sequence log-probs of the completions from the policy (old, no_grad) and from the reference
(`with model.disable_adapter()`), reward = score - 0.05 * sum KL; the leave-one-out baseline (sum of the
other k-1 rewards / (k-1)); whitened advantages; one epoch of the clipped (0.2) sequence-level ratio
loss over 4 micro-batches of 16 sequences with gradient accumulation.

Phases: (0) building and the first generation; (1) scoring; (2) the policy update; (3) a second iteration;
(4) `merge_and_unload()` then greedy generate() of 48 tokens at batch 64 under torch.inference_mode.
5 phases."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19405)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
    )
    rm_cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        vocab_size=1000,
        num_labels=1,
        pad_token_id=0,
    )
    PROMPTS, K, P, R, MICRO, EVAL_B = 4, 4, 16, 8, 4, 8
else:
    cfg = LlamaConfig(
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=22,
        num_attention_heads=32,
        num_key_value_heads=4,
        vocab_size=32000,
        max_position_embeddings=2048,
    )
    rm_cfg = LlamaConfig(
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        vocab_size=32000,
        num_labels=1,
        pad_token_id=0,
    )
    PROMPTS, K, P, R, MICRO, EVAL_B = 16, 4, 128, 48, 16, 64
BETA, CLIP = 0.05, 0.2

base = LlamaForCausalLM(cfg).to(device, torch.bfloat16)
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
base.enable_input_require_grads()
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    task_type="CAUSAL_LM",
)
policy = get_peft_model(base, lora)
policy.print_trainable_parameters()
rm = LlamaForSequenceClassification(rm_cfg).to(device, torch.bfloat16).eval().requires_grad_(False)
opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=3e-5, fused=amp)


def sample(prompts, greedy=False, model=None):
    model = model or policy
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        kwargs = dict(do_sample=False) if greedy else dict(do_sample=True, top_k=50, top_p=0.9)
        return model.generate(
            input_ids=prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=R,
            min_new_tokens=R,
            pad_token_id=0,
            use_cache=True,
            **kwargs,
        )


def seq_logps(seq):
    logits = policy(input_ids=seq, attention_mask=torch.ones_like(seq)).logits[:, P - 1 : -1].float()
    return torch.gather(logits.log_softmax(-1), 2, seq[:, P:, None]).squeeze(-1).sum(-1)


def score(seq):
    old, refl, scores = [], [], []
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        for i in range(0, seq.shape[0], MICRO):
            s = seq[i : i + MICRO]
            old.append(seq_logps(s))
            with policy.disable_adapter():
                refl.append(seq_logps(s))
            scores.append(rm(input_ids=s, attention_mask=torch.ones_like(s)).logits.squeeze(-1).float())
    old, refl, scores = torch.cat(old), torch.cat(refl), torch.cat(scores)
    rewards = (scores - BETA * (old - refl)).view(PROMPTS, K)
    baseline = (rewards.sum(1, keepdim=True) - rewards) / (K - 1)
    adv = (rewards - baseline).flatten()
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    return old, adv, scores.mean()


def update(seq, old, adv):
    policy.train()
    opt.zero_grad(set_to_none=True)
    n = seq.shape[0] // MICRO
    for i in range(0, seq.shape[0], MICRO):
        sl = slice(i, i + MICRO)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logp = seq_logps(seq[sl])
        ratio = torch.exp(logp - old[sl])
        loss = torch.max(-adv[sl] * ratio, -adv[sl] * ratio.clamp(1 - CLIP, 1 + CLIP)).mean() / n
        loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_([p for p in policy.parameters() if p.requires_grad], 1.0)
    opt.step()
    return loss.item() * n, gnorm.item()


prompts = torch.randint(1, cfg.vocab_size, (PROMPTS, P), device=device).repeat_interleave(K, 0)
seq = sample(prompts)
print(f"rollout {tuple(seq.shape)}")
if device == "cuda":
    print(f"rollout peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

old, adv, mean_score = score(seq)
print(f"mean score {mean_score.item():.4f}")
if device == "cuda":
    print(f"scoring peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

loss, gnorm = update(seq, old, adv)
print(f"rloo loss {loss:.4f} grad norm {gnorm:.4f}")
if device == "cuda":
    print(f"update peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

prompts = torch.randint(1, cfg.vocab_size, (PROMPTS, P), device=device).repeat_interleave(K, 0)
seq = sample(prompts)
old, adv, mean_score = score(seq)
loss, gnorm = update(seq, old, adv)
print(f"iteration 2 score {mean_score.item():.4f} loss {loss:.4f}")
if device == "cuda":
    print(f"iteration 2 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del opt
merged = policy.merge_and_unload()
eval_prompts = torch.randint(1, cfg.vocab_size, (EVAL_B, P), device=device)
with torch.inference_mode():
    out = sample(eval_prompts, greedy=True, model=merged)
    final = rm(input_ids=out, attention_mask=torch.ones_like(out)).logits.float()
print(f"eval score {final.mean().item():.4f}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
