"""An EMA of a causal language model's weights as users add it now to a Hugging Face training loop:
transformers' GPT2LMHeadModel built from a GPT2Config (12 layers of 768, 12 heads, context 1,024,
vocab 50,257, tied embeddings, sdpa attention as the default, no dropout), trained under bf16
autocast with AdamW(fused=True, lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on the 2-D weights only,
two param groups as nanoGPT's configure_optimizers), batch 8 x 1,024 tokens from a seeded CPU
generator, labels = input_ids (the model shifts and upcasts the logits in its loss), clipping at 1.0;
torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999),
use_buffers=True) updated after every optimizer step (one torch._foreach_lerp_ over the parameters and
buffers, the deep copy's tied weight counted once). Phases: the AveragedModel's creation and the first
step; 4 steps with EMA updates; EMA validation of 4 batches of 8 under no_grad and bf16 autocast (the
mean loss); the EMA's state_dict loaded into the trained model (load_state_dict copies in place) and
its perplexity at batch 4 under inference_mode in fp32; 4 phases."""

import math
import os

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17802)
if SMALL:
    LAYERS, D, HEADS, CTX, VOCAB, B, STEPS, EVAL_N, EVAL_B, PPL_B = 2, 64, 4, 64, 1000, 2, 2, 2, 2, 2
else:
    LAYERS, D, HEADS, CTX, VOCAB, B, STEPS, EVAL_N, EVAL_B, PPL_B = 12, 768, 12, 1024, 50257, 8, 4, 4, 8, 4
device = "cuda" if torch.cuda.is_available() else "cpu"

config = GPT2Config(
    n_layer=LAYERS,
    n_embd=D,
    n_head=HEADS,
    n_positions=CTX,
    vocab_size=VOCAB,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    bos_token_id=VOCAB - 1,
    eos_token_id=VOCAB - 1,
)
model = GPT2LMHeadModel(config).to(device)
model.train()
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=6e-4,
    betas=(0.9, 0.95),
    fused=device == "cuda",
)
data_gen = torch.Generator().manual_seed(17802)
print(f"params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999), use_buffers=True)


def batch(n):
    ids = torch.randint(0, VOCAB, (n, CTX), generator=data_gen)
    return ids.to(device)


def train_step(step):
    input_ids = batch(B)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=input_ids, labels=input_ids)
    out.loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    ema.update_parameters(model)
    print(f"step {step} loss {out.loss.item():.4f} norm {norm.item():.3f}")


train_step(0)
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, 1 + STEPS):
    train_step(step)
if device == "cuda":
    print(f"ema steps peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

ema.eval()
losses = []
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    for _ in range(EVAL_N):
        input_ids = batch(EVAL_B)
        losses.append(ema.module(input_ids=input_ids, labels=input_ids).loss)
val = torch.stack(losses).mean()
print(f"ema val loss {val.item():.4f}")
del losses, val
if device == "cuda":
    print(f"ema val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.load_state_dict(ema.module.state_dict())
model.eval()
with torch.inference_mode():
    input_ids = batch(PPL_B)
    logits = model(input_ids=input_ids).logits
    nll = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, VOCAB), input_ids[:, 1:].reshape(-1), reduction="mean"
    )
print(f"ppl {math.exp(nll.item()):.2f}")
if device == "cuda":
    print(f"ppl peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
