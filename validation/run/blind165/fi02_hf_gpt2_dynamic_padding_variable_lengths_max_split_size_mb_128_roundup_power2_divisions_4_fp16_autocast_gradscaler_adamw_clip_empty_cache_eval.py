"""GPT-2 small fine-tuning with dynamic padding (Hugging Face's DataCollatorWithPadding, each batch
padded to its own longest sequence, so every step has another shape) under an allocator told to round
requests and not to split large blocks: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128,
roundup_power2_divisions:4 set before torch is imported. transformers' GPT2LMHeadModel from
GPT2Config (124M, 12 layers, 768 wide, n_positions 1,024, sdpa attention), fp16 autocast with
torch.amp.GradScaler, AdamW (lr 6e-4, weight decay 0.1, betas 0.9/0.95) with a linear-warmup
LambdaLR, gradient clipping at 1.0 after unscale_; batch 12, the lengths of each batch drawn from a
seeded CPU generator between 96 and 1,024 tokens (right padding, attention mask, -100 labels on the
padding). Phases: 3 steps; 3 steps; torch.cuda.empty_cache() then 2 steps at the full 1,024 tokens;
an evaluation of the loss over 4 batches of mixed lengths under no_grad at batch 16;
torch.cuda.empty_cache() and 3 more steps; 5 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:128,roundup_power2_divisions:4"

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16502)
if SMALL:
    cfg = GPT2Config(vocab_size=512, n_positions=128, n_embd=64, n_layer=2, n_head=4)
    BATCH, EVAL_BATCH, MIN_LEN, MAX_LEN = 4, 8, 12, 128
else:
    cfg = GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)
    BATCH, EVAL_BATCH, MIN_LEN, MAX_LEN = 12, 16, 96, 1024
cfg.attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
lengths_gen = torch.Generator().manual_seed(165020)

model = GPT2LMHeadModel(cfg).to(device)
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=6e-4,
    betas=(0.9, 0.95),
)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 100))
scaler = torch.amp.GradScaler(device)


def collate(batch, full=False):
    """DataCollatorWithPadding: pad every example to the batch's longest, right side."""
    if full:
        lens = torch.full((batch,), MAX_LEN)
    else:
        lens = torch.randint(MIN_LEN, MAX_LEN + 1, (batch,), generator=lengths_gen)
    longest = int(lens.max())
    input_ids = torch.full((batch, longest), cfg.vocab_size - 1, dtype=torch.long)
    attention_mask = torch.zeros((batch, longest), dtype=torch.long)
    for i, n in enumerate(lens.tolist()):
        input_ids[i, :n] = torch.randint(0, cfg.vocab_size, (n,))
        attention_mask[i, :n] = 1
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    return {
        "input_ids": input_ids.to(device),
        "attention_mask": attention_mask.to(device),
        "labels": labels.to(device),
    }


def train(steps, full=False):
    model.train()
    for _ in range(steps):
        batch = collate(BATCH, full)
        with torch.autocast(device, dtype=torch.float16):
            loss = model(**batch).loss
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    return loss.item()


def report(name):
    if device == "cuda":
        print(
            f"{name}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


print(f"steps 0-2 loss {train(3):.4f}")
report("train a")
print(f"steps 3-5 loss {train(3):.4f}")
report("train b")
if device == "cuda":
    torch.cuda.empty_cache()
print(f"full-length loss {train(2, full=True):.4f}")
report("train full")

model.eval()
total = 0.0
with torch.no_grad():
    for _ in range(4):
        batch = collate(EVAL_BATCH)
        with torch.autocast(device, dtype=torch.float16):
            total += model(**batch).loss.float()
print(f"eval loss {total.item() / 4:.4f}")
report("eval")

if device == "cuda":
    torch.cuda.empty_cache()
print(f"steps 8-10 loss {train(3):.4f}")
report("train c")
