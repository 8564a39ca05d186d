"""GRPO (Shao et al. 2024, DeepSeekMath) for a Llama-style policy built from LlamaConfig (12 layers, hidden
1,024, 16 heads with 4 key/value heads, SwiGLU 2,816, 32,000-token vocabulary; random init) in the manner
of TRL's GRPOTrainer, without a value model.

The policy keeps fp32 weights and trains under bf16 autocast with gradient checkpointing
(`gradient_checkpointing_enable(use_reentrant=False)`), AdamW foreach (lr 1e-6, weight decay 0.1) and
clip_grad_norm_ 1.0; the reference is a deepcopy cast to bfloat16 (eval, no grad).

Each iteration: 16 prompts of 96 random tokens, each repeated 8 times (a group of 8, 128 sequences); a
hand-written sampling loop of 64 tokens with the model's DynamicCache (`past_key_values`, `use_cache=True`;
temperature 0.9 and nucleus top-p 0.95 by sort/cumsum/scatter, `torch.multinomial`) under inference_mode
and bf16 autocast; a completion mask up to and including the first EOS; a rule-like reward on the device
(the share of completion tokens below id 4,000 plus a length term) normalised within each group
((r - mean) / (std + 1e-4)); per-token log-probs of the completions from the reference (inference_mode);
then the GRPO loss: ratio exp(logp - logp.detach()) clipped at 0.2 times the group advantage, plus beta
0.04 times the k3 KL estimator exp(ref - logp) - (ref - logp) - 1, averaged over each sequence's mask and
over the batch, accumulated over 4 micro-batches of 32 sequences.

Phases: (0) building and the first generation; (1) reference scoring and the first optimizer step; (2) a
second iteration (generation + scoring + step); (3) evaluation: greedy decoding of 64 tokens for 64
prompts under inference_mode with the policy cast to bfloat16 after `torch.cuda.empty_cache()`. 4 phases."""

import copy
import os

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19402)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=5000,
        max_position_embeddings=512,
    )
    PROMPTS, G, P, R, MICRO, EVAL_B = 4, 4, 16, 8, 8, 8
else:
    cfg = LlamaConfig(
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
        vocab_size=32000,
        max_position_embeddings=2048,
    )
    PROMPTS, G, P, R, MICRO, EVAL_B = 16, 8, 96, 64, 32, 64
EOS = cfg.eos_token_id
BETA, EPS_CLIP = 0.04, 0.2

policy = LlamaForCausalLM(cfg).to(device)
policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
policy.config.use_cache = False
ref = copy.deepcopy(policy).to(torch.bfloat16).eval().requires_grad_(False)
opt = torch.optim.AdamW(policy.parameters(), lr=1e-6, weight_decay=0.1, foreach=True)
print(f"policy params {sum(p.numel() for p in policy.parameters())}")


def sample_top_p(logits, temperature, top_p):
    probs = (logits / temperature).softmax(-1)
    sorted_p, sorted_idx = probs.sort(-1, descending=True)
    cum = sorted_p.cumsum(-1)
    sorted_p[(cum - sorted_p) > top_p] = 0.0
    sorted_p = sorted_p / sorted_p.sum(-1, keepdim=True)
    choice = torch.multinomial(sorted_p, 1)
    return sorted_idx.gather(-1, choice)


@torch.inference_mode()
def generate(model, prompts, new_tokens, greedy=False):
    model.eval()
    cache = DynamicCache()
    ids = prompts
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        out = model(input_ids=prompts, past_key_values=cache, use_cache=True)
        for _ in range(new_tokens):
            logits = out.logits[:, -1].float()
            nxt = logits.argmax(-1, keepdim=True) if greedy else sample_top_p(logits, 0.9, 0.95)
            ids = torch.cat([ids, nxt], 1)
            out = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
    return ids


def completion_mask(completions):
    is_eos = completions == EOS
    after = is_eos.long().cumsum(-1) - is_eos.long()
    return (after == 0).float()


def rewards_of(completions, mask):
    low = ((completions < 4000).float() * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    length = mask.sum(-1) / completions.shape[1]
    return low + 0.1 * length


def token_logps(model, seq):
    logits = model(input_ids=seq).logits[:, P - 1 : -1].float()
    return torch.gather(logits.log_softmax(-1), 2, seq[:, P:, None]).squeeze(-1)


def iteration():
    prompts = torch.randint(0, cfg.vocab_size, (PROMPTS, P), device=device).repeat_interleave(G, 0)
    seq = generate(policy, prompts, R)
    completions = seq[:, P:]
    mask = completion_mask(completions)
    r = rewards_of(completions, mask).view(PROMPTS, G)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1)
    ref_logps = []
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        for i in range(0, seq.shape[0], MICRO):
            ref_logps.append(token_logps(ref, seq[i : i + MICRO]))
    ref_logps = torch.cat(ref_logps).clone()
    seq, mask, adv = seq.clone(), mask.clone(), adv.clone()
    policy.train()
    opt.zero_grad(set_to_none=True)
    steps = seq.shape[0] // MICRO
    total = 0.0
    for i in range(0, seq.shape[0], MICRO):
        sl = slice(i, i + MICRO)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logp = token_logps(policy, seq[sl])
        d = ref_logps[sl] - logp
        kl = torch.exp(d) - d - 1
        ratio = torch.exp(logp - logp.detach())
        a = adv[sl, None]
        per_token = -torch.min(ratio * a, ratio.clamp(1 - EPS_CLIP, 1 + EPS_CLIP) * a) + BETA * kl
        loss = ((per_token * mask[sl]).sum(-1) / mask[sl].sum(-1).clamp(min=1)).mean() / steps
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()
    return total, r.mean().item()


prompts0 = torch.randint(0, cfg.vocab_size, (PROMPTS, P), device=device).repeat_interleave(G, 0)
seq0 = generate(policy, prompts0, R)
print(f"generated {tuple(seq0.shape)}")
del seq0, prompts0
if device == "cuda":
    print(f"generation peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

loss, reward = iteration()
print(f"iteration 1 loss {loss:.4f} reward {reward:.4f}")
if device == "cuda":
    print(f"step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

loss, reward = iteration()
print(f"iteration 2 loss {loss:.4f} reward {reward:.4f}")
if device == "cuda":
    print(f"iteration 2 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del opt, ref
if device == "cuda":
    torch.cuda.empty_cache()
policy = policy.to(torch.bfloat16)
prompts = torch.randint(0, cfg.vocab_size, (EVAL_B, P), device=device)
out = generate(policy, prompts, R, greedy=True)
m = completion_mask(out[:, P:])
print(f"eval reward {rewards_of(out[:, P:], m).mean().item():.4f}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
