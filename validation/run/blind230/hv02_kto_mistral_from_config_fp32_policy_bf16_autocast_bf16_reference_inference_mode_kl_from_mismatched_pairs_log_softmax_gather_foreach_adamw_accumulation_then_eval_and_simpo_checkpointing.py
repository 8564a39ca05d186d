"""KTO (Kahneman-Tversky optimisation, unpaired desirable / undesirable completions) on a Hugging Face
MistralForCausalLM built from a MistralConfig (random init, nothing downloaded), then SimPO without a reference.

Model: MistralConfig(hidden 1536, intermediate 4096, 8 layers, 12 heads with 4 key/value heads, vocabulary 32,768,
sliding window 4096, SDPA attention), the policy in fp32 trained under bf16 autocast; the reference is a bf16 copy
(copy.deepcopy then .to(torch.bfloat16)), frozen, run under torch.inference_mode().

Data: random prompts of 128 tokens and completions of 384 tokens; 8 examples a micro-batch, the first half labelled
desirable and the second half undesirable (a fixed pattern, so no sizes follow the data). The KL reference point
uses mismatched pairs (prompt i with completion i + 1, torch.roll), forwarded under torch.no_grad through the policy
and through the reference; KL = mean(policy - reference).clamp(min=0), detached. Per-token log probabilities by
logits.log_softmax(-1).gather(-1, labels) with a completion mask, summed per sequence.

Training: KTO loss (beta 0.1, desirable and undesirable weights 1.0 and 1.33), torch.optim.AdamW (foreach default)
lr 5e-6, 2 micro-batches accumulated a step, clip at 1.0. Evaluation: the KTO rewards and KL under no_grad at 16
examples. Variant: the reference deleted and torch.cuda.empty_cache(); SimPO (length-normalised average log
probabilities, beta 2.0, gamma 0.5) on chosen/rejected pairs concatenated into one batch (4 pairs, 8 rows), gradient
checkpointing (non-reentrant) on the policy, a new torch.optim.AdamW(foreach=True) lr 1e-6.

Phases: the first KTO step; 2 more; evaluation; the first SimPO step; 2 more. 5 phases."""

import copy
import os

import torch
import torch.nn.functional as F
from transformers import MistralConfig, MistralForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2302)
if SMALL:
    cfg = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2)
    VOCAB, PROMPT, COMPLETION, MICRO = 512, 16, 32, 4
else:
    cfg = dict(hidden_size=1536, intermediate_size=4096, num_hidden_layers=8, num_attention_heads=12,
               num_key_value_heads=4)
    VOCAB, PROMPT, COMPLETION, MICRO = 32768, 128, 384, 8
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
BETA, W_D, W_U = 0.1, 1.0, 1.33


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


config = MistralConfig(vocab_size=VOCAB, max_position_embeddings=2048, sliding_window=4096,
                       attn_implementation="sdpa", **cfg)
policy = MistralForCausalLM(config).to(device)
reference = copy.deepcopy(policy).to(torch.bfloat16).eval().requires_grad_(False)
print(f"params {sum(p.numel() for p in policy.parameters()) / 1e6:.1f}M")


def batch(n):
    prompt = torch.randint(0, VOCAB, (n, PROMPT), device=device)
    completion = torch.randint(0, VOCAB, (n, COMPLETION), device=device)
    return prompt, completion


def logps(model, prompt, completion, average=False):
    ids = torch.cat([prompt, completion], 1)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(input_ids=ids).logits[:, PROMPT - 1 : -1]
    per_token = logits.log_softmax(-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)
    mask = torch.ones_like(completion, dtype=per_token.dtype)
    total = (per_token * mask).sum(-1)
    return total / mask.sum(-1) if average else total


desirable = torch.arange(MICRO, device=device) < MICRO // 2


def kto_loss(prompt, completion, train=True):
    policy_logps = logps(policy, prompt, completion)
    mismatched = torch.roll(completion, 1, 0)
    with torch.no_grad():
        kl_policy = logps(policy, prompt, mismatched)
    with torch.inference_mode():
        ref_logps = logps(reference, prompt, completion).float()
        kl_ref = logps(reference, prompt, mismatched).float()
    kl = (kl_policy - kl_ref).mean().clamp(min=0).detach()
    ratio = policy_logps - ref_logps.clone()
    d = desirable.repeat(prompt.shape[0] // MICRO)
    losses = torch.where(d, W_D * (1 - torch.sigmoid(BETA * (ratio - kl))), W_U * (1 - torch.sigmoid(BETA * (kl - ratio))))
    return losses.mean(), kl, (BETA * ratio).detach()


opt = torch.optim.AdamW(policy.parameters(), lr=5e-6, weight_decay=0.0)


def kto_step(accum=2):
    for _ in range(accum):
        loss, kl, _ = kto_loss(*batch(MICRO))
        (loss / accum).backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item(), kl.item()


policy.train()
loss, kl = kto_step()
print(f"kto step 0 loss {loss:.4f} kl {kl:.4f}")
report("kto first step")
for _ in range(2):
    loss, kl = kto_step()
print(f"kto step 2 loss {loss:.4f} kl {kl:.4f}")
report("kto train")

policy.eval()
with torch.no_grad():
    loss, kl, rewards = kto_loss(*batch(2 * MICRO))
print(f"eval kto loss {loss.item():.4f} kl {kl.item():.4f} reward mean {rewards.mean().item():.4f}")
report("eval")

del reference
if device == "cuda":
    torch.cuda.empty_cache()
policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
policy.config.use_cache = False
policy.train()
del opt
opt = torch.optim.AdamW(policy.parameters(), lr=1e-6, weight_decay=0.0, foreach=True)
PAIRS = MICRO // 2


def simpo_step(beta=2.0, gamma=0.5):
    prompt, chosen = batch(PAIRS)
    rejected = torch.randint(0, VOCAB, chosen.shape, device=device)
    avg = logps(policy, torch.cat([prompt, prompt], 0), torch.cat([chosen, rejected], 0), average=True)
    loss = -F.logsigmoid(beta * (avg[:PAIRS] - avg[PAIRS:]) - gamma).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


print(f"simpo step 0 loss {simpo_step():.4f}")
report("simpo first step")
for _ in range(2):
    loss = simpo_step()
print(f"simpo step 2 loss {loss:.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
