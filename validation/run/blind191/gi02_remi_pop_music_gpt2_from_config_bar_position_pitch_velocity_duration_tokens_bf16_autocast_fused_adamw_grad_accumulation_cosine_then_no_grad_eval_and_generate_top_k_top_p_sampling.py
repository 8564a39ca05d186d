"""A REMI pop-music language model (Huang & Yang 2020, "Pop Music Transformer"), with transformers'
GPT2LMHeadModel built from a GPT2Config (no downloads): REMI events (Bar, Position 1/16, Chord,
Tempo class/value, Note-Velocity, Note-On pitch, Note-Duration) give a vocabulary of 332 tokens plus
BOS/EOS/PAD (335); 12 layers, n_embd 768, 12 heads, n_positions 2,048, dropout 0.1, the model's default
attention implementation. Random REMI-shaped sequences (bar and position tokens on their grid, the rest
uniform) are built on the host and copied to the device with pin_memory / non_blocking as a data
loader would.

Training under bf16 autocast with fused AdamW (lr 3e-4, weight decay 0.1 on matrices only, betas
(0.9, 0.95)), a cosine schedule with warm-up, 2 micro-batches of 8 x 1,024 tokens per optimizer step
(loss / 2), labels = input_ids (the model shifts them), gradient clipping at 1.0. Phases: the first
optimizer step; 2 more; evaluation under torch.no_grad at batch 16 (loss in bf16 autocast); then
`generate()` with sampling (top_k 40, top_p 0.92, temperature 1.1) of exactly 192 new tokens
(min_new_tokens == max_new_tokens) from 4 primers of 128 tokens under bf16 autocast. 4 phases."""

import math
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19102)
if SMALL:
    LAYERS, EMBD, HEADS, B, L, ACCUM, STEPS, EVAL_B, GEN_B, PRIMER, NEW = 2, 64, 2, 2, 64, 2, 1, 2, 2, 16, 8
else:
    LAYERS, EMBD, HEADS, B, L, ACCUM, STEPS, EVAL_B, GEN_B, PRIMER, NEW = (
        12,
        768,
        12,
        8,
        1024,
        2,
        2,
        16,
        4,
        128,
        192,
    )
N_BAR, N_POS, N_CHORD, N_TEMPO, N_VEL, N_PITCH, N_DUR = 1, 16, 133, 60, 32, 86, 64
VOCAB = N_BAR + N_POS + N_CHORD + N_TEMPO + N_VEL + N_PITCH + N_DUR + 3
BOS, EOS, PAD = VOCAB - 3, VOCAB - 2, VOCAB - 1
device = "cuda" if torch.cuda.is_available() else "cpu"

config = GPT2Config(
    vocab_size=VOCAB,
    n_positions=2048,
    n_embd=EMBD,
    n_layer=LAYERS,
    n_head=HEADS,
    resid_pdrop=0.1,
    embd_pdrop=0.1,
    attn_pdrop=0.1,
    bos_token_id=BOS,
    eos_token_id=EOS,
    pad_token_id=PAD,
)
model = GPT2LMHeadModel(config).to(device)
print(f"params {model.num_parameters() / 1e6:.1f}M")

decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-4,
    betas=(0.9, 0.95),
    fused=device == "cuda",
)
total_steps, warm = 1000, 50
sched = torch.optim.lr_scheduler.LambdaLR(
    opt,
    lambda s: (
        (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / (total_steps - warm)))
    ),
)


def remi_batch(b, n):
    # bar / position tokens on a 16-step grid, the other events uniform over their ranges
    toks = torch.randint(N_BAR + N_POS, VOCAB - 3, (b, n))
    idx = torch.arange(n)
    toks[:, idx % 64 == 0] = 0
    pos_slots = idx % 4 == 1
    toks[:, pos_slots] = N_BAR + (idx[pos_slots] // 4) % N_POS
    toks[:, 0] = BOS
    return toks.pin_memory() if device == "cuda" else toks


def train_step():
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for _ in range(ACCUM):
        ids = remi_batch(B, L).to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            out = model(input_ids=ids, labels=ids)
        (out.loss / ACCUM).backward()
        total += out.loss.item() / ACCUM
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return total


model.train()
print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    print(f"step {step} loss {train_step():.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    ids = remi_batch(EVAL_B, L).to(device, non_blocking=True)
    eval_loss = model(input_ids=ids, labels=ids).loss
print(f"eval loss {eval_loss.item():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

primer = remi_batch(GEN_B, PRIMER).to(device)
with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    out = model.generate(
        primer,
        attention_mask=torch.ones_like(primer),
        do_sample=True,
        top_k=40,
        top_p=0.92,
        temperature=1.1,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        pad_token_id=PAD,
    )
print(f"generated {tuple(out.shape)}")
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
