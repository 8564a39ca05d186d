"""A reward model trained on preference pairs with the Bradley-Terry loss, as TRL's RewardTrainer does it:
Qwen2ForSequenceClassification (num_labels=1) shaped like Qwen2-0.5B (24 layers, hidden 896, 14 heads with
2 key/value heads, SwiGLU 4,864, 151,936-token vocabulary, tied-off score head; random init from
Qwen2Config, pad_token_id set so the reward is read at each sequence's last non-pad token).

Data: pairs of (prompt + chosen, prompt + rejected) token sequences of up to 384 tokens, right-padded, with
lengths drawn on the host; chosen and rejected rows are concatenated into one batch per micro-batch (4 pairs,
8 sequences). Loss: -logsigmoid(r_chosen - r_rejected) plus TRL's center_rewards_coefficient 0.01 times
mean((r_chosen + r_rejected) ** 2). fp32 weights, fp16 autocast with torch.amp.GradScaler, AdamW (foreach
default, lr 1e-5, weight decay 0.01), gradient accumulation over 4 micro-batches, unscale_ + clip_grad_norm_
1.0, a linear warmup LambdaLR.

Phases: (0) building and the first optimizer step; (1) two more steps; (2) evaluation under
torch.inference_mode and fp16 autocast: accuracy (r_chosen > r_rejected) over 128 pairs in chunks of 16
pairs, rewards moved to the host; (3) after deleting the first model and `torch.cuda.empty_cache()`, a
Llama-2-style reward model (LlamaForSequenceClassification of 16 layers x 1,024, 32,000 tokens) trained
with the margin loss -logsigmoid(r_c - r_r - m(rating)) where the margin comes from a 4-level preference
rating, fp32 weights under bf16 autocast with torch.optim.Adafactor, 3 steps of 8 pairs at 512 tokens.
4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import (
    LlamaConfig,
    LlamaForSequenceClassification,
    Qwen2Config,
    Qwen2ForSequenceClassification,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19403)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    qcfg = Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        num_labels=1,
        pad_token_id=0,
    )
    lcfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        vocab_size=1000,
        num_labels=1,
        pad_token_id=0,
    )
    L, PAIRS, ACCUM, STEPS, EVAL_PAIRS, EVAL_CHUNK, L2, PAIRS2 = 32, 2, 2, 1, 8, 4, 32, 2
else:
    qcfg = Qwen2Config(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        max_position_embeddings=4096,
        num_labels=1,
        pad_token_id=151643,
    )
    lcfg = LlamaConfig(
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=16,
        num_attention_heads=16,
        vocab_size=32000,
        num_labels=1,
        pad_token_id=0,
    )
    L, PAIRS, ACCUM, STEPS, EVAL_PAIRS, EVAL_CHUNK, L2, PAIRS2 = 384, 4, 4, 2, 128, 16, 512, 8


def make_pairs(n, length, vocab, pad):
    seqs = torch.randint(1, vocab, (2 * n, length))
    seqs[seqs == pad] = 1
    prompt_len = torch.randint(length // 4, length // 2, (n,))
    for i in range(2 * n):
        total = int(prompt_len[i % n]) + int(torch.randint(length // 8, length // 2, ()))
        seqs[i, min(total, length) :] = pad
    seqs[n:, : length // 4] = seqs[:n, : length // 4]
    mask = (seqs != pad).long()
    return seqs.to(device), mask.to(device)


model = Qwen2ForSequenceClassification(qcfg).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
scaler = torch.amp.GradScaler("cuda", enabled=amp)
print(f"reward model params {sum(p.numel() for p in model.parameters())}")


def rm_step():
    model.train()
    accs = []
    for _ in range(ACCUM):
        ids, mask = make_pairs(PAIRS, L, qcfg.vocab_size, qcfg.pad_token_id)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            rewards = model(input_ids=ids, attention_mask=mask).logits.squeeze(-1).float()
        r_c, r_r = rewards[:PAIRS], rewards[PAIRS:]
        loss = -F.logsigmoid(r_c - r_r).mean() + 0.01 * ((r_c + r_r) ** 2).mean()
        scaler.scale(loss / ACCUM).backward()
        accs.append((r_c > r_r).float().mean())
    scaler.unscale_(opt)
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    sched.step()
    return loss.item(), torch.stack(accs).mean().item(), gnorm.item()


loss, acc, gnorm = rm_step()
print(f"step 0 loss {loss:.4f} acc {acc:.3f} grad norm {gnorm:.3f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss, acc, gnorm = rm_step()
print(f"step {STEPS} loss {loss:.4f} acc {acc:.3f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
chosen, rejected = [], []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    for _ in range(0, EVAL_PAIRS, EVAL_CHUNK):
        ids, mask = make_pairs(EVAL_CHUNK, L, qcfg.vocab_size, qcfg.pad_token_id)
        r = model(input_ids=ids, attention_mask=mask).logits.squeeze(-1).float().cpu()
        chosen.append(r[:EVAL_CHUNK])
        rejected.append(r[EVAL_CHUNK:])
chosen, rejected = torch.cat(chosen), torch.cat(rejected)
acc = (chosen > rejected).float().mean().item()
print(f"eval accuracy {acc:.3f} margin {(chosen - rejected).mean().item():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, opt, sched, scaler
if device == "cuda":
    torch.cuda.empty_cache()

MARGINS = torch.tensor([0.0, 1 / 3, 2 / 3, 1.0], device=device)
rm2 = LlamaForSequenceClassification(lcfg).to(device)
opt2 = torch.optim.Adafactor(rm2.parameters(), lr=1e-3)
rm2.train()
for step in range(3):
    ids, mask = make_pairs(PAIRS2, L2, lcfg.vocab_size, lcfg.pad_token_id)
    rating = torch.randint(0, 4, (PAIRS2,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        rewards = rm2(input_ids=ids, attention_mask=mask).logits.squeeze(-1).float()
    loss = -F.logsigmoid(rewards[:PAIRS2] - rewards[PAIRS2:] - MARGINS[rating]).mean()
    opt2.zero_grad(set_to_none=True)
    loss.backward()
    opt2.step()
    print(f"margin rm step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"margin rm allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
