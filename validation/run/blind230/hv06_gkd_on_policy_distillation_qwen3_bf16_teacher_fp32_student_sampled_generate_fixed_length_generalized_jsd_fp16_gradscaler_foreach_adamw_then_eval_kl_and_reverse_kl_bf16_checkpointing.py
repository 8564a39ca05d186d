"""Generalized knowledge distillation (GKD, on-policy distillation of a language model as in TRL's GKDTrainer)
written by hand on Hugging Face Qwen3ForCausalLM models built from configs (random init, nothing downloaded): a
frozen bf16 teacher, an fp32 student, the generalized Jensen-Shannon divergence over the full 151,936-token
vocabulary.

Models: teacher Qwen3Config(hidden 2048, intermediate 6144, 12 layers, 16 heads with 4 key/value heads of 128,
vocabulary 151,936, tied embeddings, SDPA) in bf16, eval, requires_grad_(False); student Qwen3Config(hidden 1024,
intermediate 3072, 8 layers, 16 heads with 8 key/value heads of 64, same vocabulary, tied) in fp32.

Training (fp16 autocast, torch.amp.GradScaler, torch.optim.AdamW foreach default lr 1e-5, clip 1.0): steps
alternate between on-policy data (the student samples 128 tokens after 128-token prompts with generate(do_sample
True, top_k 0, temperature 1.0, min_new_tokens = max_new_tokens = 128), 8 sequences) and off-policy data (8 random
sequences of 256 tokens). The loss on the 128 answer positions: generalized JSD with beta 0.5, mixture
logsumexp(stack([s + log(1 - beta), t + log(beta)])), then beta * KL(t || m) + (1 - beta) * KL(s || m) by
F.kl_div(log_target=True, reduction="none"), summed over the vocabulary and averaged over tokens; the teacher's
logits under torch.no_grad, both log_softmax'd in fp32 at temperature 1.

Evaluation: the token-mean forward KL(teacher || student) under torch.inference_mode at 16 x 256. Variant: the
student's reverse KL(student || teacher) at temperature 2.0 on off-policy data, bf16 autocast with no scaler,
gradient checkpointing (non-reentrant), a new torch.optim.AdamW(fused=True) lr 5e-6, 16 sequences of 256.

Phases: the first on-policy generation; the first GKD step; 3 more steps (generation, off-policy, generation);
evaluation; the first reverse-KL step; 2 more. 6 phases."""

import math
import os

import torch
import torch.nn.functional as F
from transformers import Qwen3Config, Qwen3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2306)
if SMALL:
    tcfg = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32)
    scfg = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=2, head_dim=32)
    VOCAB, PROMPT, NEW, BATCH = 1024, 16, 16, 2
else:
    tcfg = dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=12, num_attention_heads=16,
                num_key_value_heads=4, head_dim=128)
    scfg = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=8, num_attention_heads=16,
                num_key_value_heads=8, head_dim=64)
    VOCAB, PROMPT, NEW, BATCH = 151936, 128, 128, 8
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
BETA = 0.5


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


common = dict(vocab_size=VOCAB, tie_word_embeddings=True, max_position_embeddings=1024, pad_token_id=0,
              eos_token_id=1, bos_token_id=2, attn_implementation="sdpa")
teacher = Qwen3ForCausalLM(Qwen3Config(**common, **tcfg)).to(device=device, dtype=torch.bfloat16)
teacher.eval().requires_grad_(False)
student = Qwen3ForCausalLM(Qwen3Config(**common, **scfg)).to(device)
print(f"teacher {sum(p.numel() for p in teacher.parameters()) / 1e6:.1f}M student {sum(p.numel() for p in student.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(student.parameters(), lr=1e-5, weight_decay=0.0)
scaler = torch.amp.GradScaler("cuda", enabled=amp)


def on_policy_batch():
    prompts = torch.randint(3, VOCAB, (BATCH, PROMPT), device=device)
    student.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        seqs = student.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True, top_k=0,
                                temperature=1.0, max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0)
    student.train()
    return seqs


def off_policy_batch(n=BATCH):
    return torch.randint(3, VOCAB, (n, PROMPT + NEW), device=device)


def answer_logits(model, seqs):
    return model(input_ids=seqs).logits[:, PROMPT - 1 : -1]


def generalized_jsd(s_logits, t_logits, beta=BETA):
    s = F.log_softmax(s_logits.float(), -1)
    t = F.log_softmax(t_logits.float(), -1)
    m = torch.logsumexp(torch.stack([s + math.log(1 - beta), t + math.log(beta)]), 0)
    jsd = beta * F.kl_div(m, t, reduction="none", log_target=True) + (1 - beta) * F.kl_div(
        m, s, reduction="none", log_target=True
    )
    return jsd.sum(-1).mean()


def gkd_step(seqs):
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        with torch.no_grad():
            t_logits = answer_logits(teacher, seqs)
        s_logits = answer_logits(student, seqs)
    loss = generalized_jsd(s_logits, t_logits)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    return loss.item()


seqs = on_policy_batch()
print(f"generated {tuple(seqs.shape)}")
report("generate")
print(f"gkd step 0 loss {gkd_step(seqs):.4f} scale {scaler.get_scale()}")
report("gkd first step")
for i in range(1, 4):
    loss = gkd_step(on_policy_batch() if i % 2 == 0 else off_policy_batch())
print(f"gkd step 3 loss {loss:.4f} scale {scaler.get_scale()}")
report("gkd train")

student.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    seqs = off_policy_batch(2 * BATCH)
    t = F.log_softmax(answer_logits(teacher, seqs).float(), -1)
    s = F.log_softmax(answer_logits(student, seqs).float(), -1)
    kl = F.kl_div(s, t, reduction="batchmean", log_target=True) / NEW
print(f"eval forward kl {kl.item():.4f}")
report("eval")

del opt, scaler
student.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
student.config.use_cache = False
student.train()
opt = torch.optim.AdamW(student.parameters(), lr=5e-6, weight_decay=0.0, fused=device == "cuda")


def reverse_kl_step(temperature=2.0):
    seqs = off_policy_batch(2 * BATCH)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        with torch.no_grad():
            t_logits = answer_logits(teacher, seqs)
        s_logits = answer_logits(student, seqs)
    s = F.log_softmax(s_logits.float() / temperature, -1)
    t = F.log_softmax(t_logits.float() / temperature, -1)
    loss = (s.exp() * (s - t)).sum(-1).mean() * temperature**2
    loss.backward()
    torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


print(f"reverse kl step 0 loss {reverse_kl_step():.4f}")
report("reverse kl first step")
for _ in range(2):
    loss = reverse_kl_step()
print(f"reverse kl step 2 loss {loss:.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
