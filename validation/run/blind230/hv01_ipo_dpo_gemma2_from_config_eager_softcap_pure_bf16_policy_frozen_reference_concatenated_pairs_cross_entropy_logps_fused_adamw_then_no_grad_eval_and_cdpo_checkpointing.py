"""IPO and conservative DPO on a Hugging Face Gemma2ForCausalLM built from a Gemma2Config (random init, nothing
downloaded): a trainable policy and a frozen reference copy, both resident in pure bf16.

Model: Gemma2Config(hidden 1024, intermediate 4096, 10 layers, 8 heads with 4 key/value heads of 128, vocabulary
64,000, sliding window 256 on alternate layers, attention and final logit soft-capping), eager attention (as Gemma2
training is advised), parameters in bf16 (model.to(torch.bfloat16)); the reference is copy.deepcopy of the policy,
eval() and requires_grad_(False), run under torch.no_grad().

Data: random pairs; each pair shares a 128-token prompt and has a 256-token chosen and a 256-token rejected answer;
chosen and rejected are concatenated into one batch of 2 x PAIRS rows of 384 tokens. The per-sequence log
probability is -F.cross_entropy(logits.float(), labels, reduction="none", ignore_index=-100) summed over the
answer tokens (the prompt's labels are -100).

Training: IPO loss ((log ratio margin - 1 / (2 beta))^2, beta 0.1), torch.optim.AdamW(fused=True) lr 5e-7 on the bf16
parameters, clip at 1.0, 4 pairs a step. Evaluation: reward accuracy and margins under torch.no_grad at 8 pairs.
Variant: conservative DPO (sigmoid loss with label smoothing 0.1), gradient checkpointing (non-reentrant) on the
policy, 8 pairs a step, after torch.cuda.empty_cache().

Phases: the first IPO step; 3 more; evaluation; the first cDPO step with checkpointing; 2 more. 5 phases."""

import copy
import os

import torch
import torch.nn.functional as F
from transformers import Gemma2Config, Gemma2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2301)
if SMALL:
    cfg = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32, sliding_window=16)
    VOCAB, PROMPT, ANSWER, PAIRS = 512, 16, 32, 2
else:
    cfg = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=10, num_attention_heads=8,
               num_key_value_heads=4, head_dim=128, sliding_window=256)
    VOCAB, PROMPT, ANSWER, PAIRS = 64000, 128, 256, 4
device = "cuda" if torch.cuda.is_available() else "cpu"
BETA = 0.1


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


config = Gemma2Config(vocab_size=VOCAB, max_position_embeddings=1024, attn_implementation="eager", **cfg)
policy = Gemma2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
reference = copy.deepcopy(policy).eval().requires_grad_(False)
print(f"params {sum(p.numel() for p in policy.parameters()) / 1e6:.1f}M")


def make_batch(pairs):
    prompt = torch.randint(0, VOCAB, (pairs, PROMPT), device=device)
    chosen = torch.randint(0, VOCAB, (pairs, ANSWER), device=device)
    rejected = torch.randint(0, VOCAB, (pairs, ANSWER), device=device)
    ids = torch.cat([torch.cat([prompt, chosen], 1), torch.cat([prompt, rejected], 1)], 0)
    labels = ids.clone()
    labels[:, :PROMPT] = -100
    return ids, labels


def sequence_logps(model, ids, labels):
    logits = model(input_ids=ids).logits[:, :-1]
    target = labels[:, 1:]
    nll = F.cross_entropy(logits.float().reshape(-1, VOCAB), target.reshape(-1), reduction="none", ignore_index=-100)
    return -nll.view(target.shape).sum(-1)


def margins(ids, labels, pairs):
    logps = sequence_logps(policy, ids, labels)
    with torch.no_grad():
        ref = sequence_logps(reference, ids, labels)
    ratio = logps - ref
    return ratio[:pairs], ratio[pairs:]


def ipo_loss(ids, labels, pairs):
    c, r = margins(ids, labels, pairs)
    return ((c - r - 1 / (2 * BETA)) ** 2).mean()


def cdpo_loss(ids, labels, pairs, eps=0.1):
    c, r = margins(ids, labels, pairs)
    z = BETA * (c - r)
    return (-(1 - eps) * F.logsigmoid(z) - eps * F.logsigmoid(-z)).mean()


opt = torch.optim.AdamW(policy.parameters(), lr=5e-7, weight_decay=0.0, fused=device == "cuda")


def step(loss_fn, pairs):
    ids, labels = make_batch(pairs)
    loss = loss_fn(ids, labels, pairs)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


policy.train()
print(f"ipo step 0 loss {step(ipo_loss, PAIRS):.4f}")
report("ipo first step")
for _ in range(3):
    loss = step(ipo_loss, PAIRS)
print(f"ipo step 3 loss {loss:.4f}")
report("ipo train")

policy.eval()
with torch.no_grad():
    ids, labels = make_batch(2 * PAIRS)
    c, r = margins(ids, labels, 2 * PAIRS)
    acc = (c > r).float().mean().item()
    margin = (BETA * (c - r)).mean().item()
print(f"eval reward accuracy {acc:.3f} margin {margin:.4f}")
report("eval")

torch.cuda.empty_cache() if device == "cuda" else None
policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
policy.config.use_cache = False
policy.train()
print(f"cdpo step 0 loss {step(cdpo_loss, 2 * PAIRS):.4f}")
report("cdpo first step")
for _ in range(2):
    loss = step(cdpo_loss, 2 * PAIRS)
print(f"cdpo step 2 loss {loss:.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
