"""Logit distillation of a causal language model (the "KD" baseline of MiniLLM / DistiLLM and of
sequence-level compression work): a transformers LlamaForCausalLM teacher into a narrower, shallower
Llama student, on random token sequences.

Teacher: LlamaForCausalLM from LlamaConfig (hidden 1,024, 16 layers, 16 heads with 4 KV heads,
intermediate 2,816, vocabulary 32,000, random init, nothing downloaded), cast with .bfloat16(), eval mode,
its logits computed under torch.no_grad. Student: LlamaForCausalLM of hidden 512, 8 layers, 8 heads,
intermediate 1,408, fp32 weights under bf16 autocast, gradient checkpointing (use_reentrant=False),
use_cache off. Loss: 0.5 * next-token CE + 0.5 * forward KL(teacher || student) at T = 1 computed over
the sequence in chunks of 256 positions (fp32 log_softmax of both per chunk, summed, divided by the
number of tokens). Batch 8 x 1,024 tokens, 2 micro-batches accumulated per step. Optimizer: LAMB written
by hand (Adam moments by torch._foreach_* ops, bias correction, decoupled weight decay 0.01 except norms,
per-tensor trust ratio ||w|| / ||update|| from torch._foreach_norm), lr 2e-3, clip_grad_norm_ 1.0.

Phases: the first step; 2 more steps; evaluation under torch.inference_mode: the student's and the
teacher's perplexity on 4 batches of 8 x 1,024, then the student's greedy generate() of 64 new tokens
(min_new_tokens 64) from 16 prompts of 128; then sparse KD from an offline cache: the teacher's top-64
logits and their indices for 2 batches computed under torch.no_grad and moved to pinned host memory,
then 2 student steps on them (the cached pieces copied back non_blocking, the student's log-probabilities
gathered at the 64 indices against the renormalized teacher top-64, plus CE). 4 phases."""

import math
import os

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19706)
if SMALL:
    B, L, STEPS, EVAL_N, GEN_B, PROMPT, NEW, TOPK, CHUNK = 2, 64, 1, 1, 2, 16, 8, 8, 16
    T_CFG = dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=176,
    )
    S_CFG = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=88,
    )
else:
    B, L, STEPS, EVAL_N, GEN_B, PROMPT, NEW, TOPK, CHUNK = 8, 1024, 2, 4, 16, 128, 64, 64, 256
    T_CFG = dict(
        hidden_size=1024,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=4,
        intermediate_size=2816,
    )
    S_CFG = dict(
        hidden_size=512,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=8,
        intermediate_size=1408,
    )
VOCAB, ACCUM = 32000, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

common = dict(vocab_size=VOCAB, max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False)
teacher = LlamaForCausalLM(LlamaConfig(**common, **T_CFG)).to(device).bfloat16().eval()
student = LlamaForCausalLM(LlamaConfig(**common, **S_CFG)).to(device)
student.config.use_cache = False
student.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
student.train()
print(
    f"teacher params {sum(p.numel() for p in teacher.parameters())} "
    f"student params {sum(p.numel() for p in student.parameters())}"
)


class Lamb(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            for p in params:
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] += 1
            m = [self.state[p]["exp_avg"] for p in params]
            v = [self.state[p]["exp_avg_sq"] for p in params]
            b1, b2 = group["betas"]
            step = self.state[params[0]]["step"]
            torch._foreach_lerp_(m, grads, 1 - b1)
            torch._foreach_mul_(v, b2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - b2)
            denom = torch._foreach_sqrt(v)
            torch._foreach_div_(denom, math.sqrt(1 - b2**step))
            torch._foreach_add_(denom, group["eps"])
            update = torch._foreach_div(m, denom)
            torch._foreach_div_(update, 1 - b1**step)
            if group["weight_decay"]:
                torch._foreach_add_(update, params, alpha=group["weight_decay"])
            w_norm = torch._foreach_norm(params)
            u_norm = torch._foreach_norm(update)
            for p, u, wn, un in zip(params, update, w_norm, u_norm, strict=True):
                trust = torch.where((wn > 0) & (un > 0), wn / un, torch.ones_like(wn))
                p.add_(u * trust, alpha=-group["lr"])


decay = [p for n, p in student.named_parameters() if p.ndim > 1]
no_decay = [p for n, p in student.named_parameters() if p.ndim <= 1]
opt = Lamb([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=2e-3)


def tokens(n, length):
    return torch.randint(0, VOCAB, (n, length), device=device)


def chunked_kl(s_logits, t_logits):
    total = s_logits.new_zeros((), dtype=torch.float32)
    for i in range(0, s_logits.shape[1], CHUNK):
        s = F.log_softmax(s_logits[:, i : i + CHUNK].float(), -1)
        t = F.log_softmax(t_logits[:, i : i + CHUNK].float(), -1)
        total = total + (t.exp() * (t - s)).sum()
    return total / (s_logits.shape[0] * s_logits.shape[1])


def kd_step():
    for _ in range(ACCUM):
        ids = tokens(B, L)
        with torch.no_grad():
            t_logits = teacher(input_ids=ids).logits
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            s_logits = student(input_ids=ids).logits
        ce = F.cross_entropy(s_logits[:, :-1].float().reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        loss = 0.5 * ce + 0.5 * chunked_kl(s_logits, t_logits)
        (loss / ACCUM).backward()
        del t_logits, s_logits
    torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


print(f"step 0 loss {kd_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = kd_step()
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

student.eval()
s_nll, t_nll = 0.0, 0.0
with torch.inference_mode():
    for _ in range(EVAL_N):
        ids = tokens(B, L)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            s_nll += student(input_ids=ids, labels=ids).loss.item()
        t_nll += teacher(input_ids=ids, labels=ids).loss.item()
    student.config.use_cache = True
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        out = student.generate(
            tokens(GEN_B, PROMPT),
            attention_mask=None,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            pad_token_id=0,
        )
print(
    f"eval student ppl {math.exp(min(s_nll / EVAL_N, 30)):.1f}"
    f" teacher ppl {math.exp(min(t_nll / EVAL_N, 30)):.1f} "
    f"generated {tuple(out.shape)}"
)
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

student.config.use_cache = False
student.train()
cache = []
batches = [tokens(B, L) for _ in range(2)]
pin = device == "cuda"
with torch.no_grad():
    for ids in batches:
        vals, idx = teacher(input_ids=ids).logits.topk(TOPK, dim=-1)
        vals, idx = vals.float().cpu(), idx.int().cpu()
        cache.append((vals.pin_memory(), idx.pin_memory()) if pin else (vals, idx))
for ids, (vals_h, idx_h) in zip(batches, cache, strict=True):
    vals = vals_h.to(device, non_blocking=True)
    idx = idx_h.to(device, non_blocking=True).long()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        s_logits = student(input_ids=ids).logits
    s_logp = F.log_softmax(s_logits.float(), -1)
    p_t = F.softmax(vals, -1)
    sparse_kd = -(p_t * s_logp.gather(-1, idx)).sum(-1).mean()
    ce = F.nll_loss(s_logp[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    loss = 0.5 * ce + 0.5 * sparse_kd
    loss.backward()
    torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"sparse kd loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"sparse kd allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
