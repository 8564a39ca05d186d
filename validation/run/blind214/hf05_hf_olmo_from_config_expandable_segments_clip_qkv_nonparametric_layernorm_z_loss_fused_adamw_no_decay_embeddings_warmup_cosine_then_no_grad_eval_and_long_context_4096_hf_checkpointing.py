"""OlmoForCausalLM from a config, pre-trained the OLMo way, under expandable segments.

PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is set at the top, before torch is imported.

Model: OlmoConfig with 16 layers of 1024, 16 heads, SwiGLU 4096, non-parametric LayerNorm, clip_qkv 8.0,
vocabulary 50,304 untied, sdpa attention; fp32 weights.

Training: bf16 autocast; the loss by hand from the model's logits: cross entropy in fp32 plus a z-loss of
1e-4 * logsumexp²; fused AdamW (betas 0.9/0.95, eps 1e-8) with weight decay 0.1 on the block matrices and
none on the embeddings and head; linear warmup then cosine decay by LambdaLR; clip_grad_norm_ 1.0.

Phases: the first step at batch 6 x 2048; 3 more steps; evaluation of two batches under no_grad; then a
long-context stage: empty_cache(), rope_theta kept, HF gradient checkpointing (use_reentrant False) at
batch 2 x 4096 with the same optimizer, 3 steps. 4 phases."""

import math
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
from transformers import OlmoConfig, OlmoForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2145)
if SMALL:
    cfg = dict(
        vocab_size=512, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256
    )
    CTX, BATCH, LONG_BATCH = 64, 2, 1
else:
    cfg = dict(
        vocab_size=50304,
        hidden_size=1024,
        num_hidden_layers=16,
        num_attention_heads=16,
        intermediate_size=4096,
    )
    CTX, BATCH, LONG_BATCH = 2048, 6, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


config = OlmoConfig(
    **cfg,
    max_position_embeddings=2 * CTX,
    clip_qkv=8.0,
    tie_word_embeddings=False,
    attn_implementation="sdpa",
)
model = OlmoForCausalLM(config).to(device)
model.config.use_cache = False
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
decay = [p for n, p in model.named_parameters() if p.ndim == 2 and "layers." in n]
no_decay = [p for n, p in model.named_parameters() if not (p.ndim == 2 and "layers." in n)]
opt = torch.optim.AdamW(
    [dict(params=decay, weight_decay=0.1), dict(params=no_decay, weight_decay=0.0)],
    lr=4e-4,
    betas=(0.9, 0.95),
    eps=1e-8,
    fused=device == "cuda",
)
WARMUP, TOTAL = 2, 10
sched = torch.optim.lr_scheduler.LambdaLR(
    opt,
    lambda s: (
        (s + 1) / WARMUP if s < WARMUP else 0.5 * (1 + math.cos(math.pi * (s - WARMUP) / (TOTAL - WARMUP)))
    ),
)


def lm_loss(batch, ctx):
    ids = torch.randint(0, config.vocab_size, (batch, ctx + 1), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(input_ids=ids[:, :-1]).logits
    logits = logits.float().view(-1, config.vocab_size)
    ce = F.cross_entropy(logits, ids[:, 1:].reshape(-1))
    z = torch.logsumexp(logits, dim=-1).square().mean()
    return ce + 1e-4 * z


def step(batch, ctx):
    loss = lm_loss(batch, ctx)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"step 0 loss {step(BATCH, CTX):.4f}")
report("first step")
for _ in range(3):
    loss = step(BATCH, CTX)
print(f"step 3 loss {loss:.4f} lr {sched.get_last_lr()[0]:.2e}")
report("train")

model.eval()
with torch.no_grad():
    losses = [lm_loss(BATCH, CTX).item() for _ in range(2)]
print(f"eval loss {sum(losses) / 2:.4f}")
report("eval")

torch.cuda.empty_cache()
model.train()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
for i in range(3):
    print(f"long-context step {i} loss {step(LONG_BATCH, 2 * CTX):.4f}")
report("long context")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
