"""Few-shot extractive QA with HF Splinter (model_type "splinter"): recurring span selection
pretraining on SplinterForPreTraining (a base-sized config: 768 wide, 12 layers) where every passage
carries up to 6 [QUESTION] tokens whose positions (padded with 0, the ignored label) are passed as
question_positions, batches of 16 x 384 under fp16 autocast with a GradScaler (init_scale 2**10,
unscale_ + clip_grad_norm_) and AdamW with a linear warmup, 3 steps. The pretrained encoder and
question-aware span selection head are then copied into a SplinterForQuestionAnswering (its
question position found from the [QUESTION] token by the model), fine-tuned 2 steps at 24 x 384 with
the same scaler and a fresh SGD nesterov optimizer. Last, the QA model is cast to fp16 and decodes
spans under inference_mode: start/end top-k 20, pair scores masked to spans of 0-29 tokens, the best span per
question, at 64 x 384.

Phases: 0 pretraining model built; 1 first pretraining step; 2 two more steps; 3 QA model copied and
fine-tuned; 4 fp16 span decoding."""

import os

import torch
from transformers import (
    SplinterConfig,
    SplinterForPreTraining,
    SplinterForQuestionAnswering,
    get_linear_schedule_with_warmup,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3231)
if SMALL:
    config = SplinterConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, question_token_id=104)
    B, S, Q, B_QA, B_DEC = 2, 32, 3, 2, 4
else:
    config = SplinterConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                            intermediate_size=3072, max_position_embeddings=512, question_token_id=104)
    B, S, Q, B_QA, B_DEC = 16, 384, 6, 24, 64
MAX_SPAN = 30
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def passages(n, n_questions):
    """Passages with n_questions [QUESTION] tokens replacing a recurring span each; labels point at
    another occurrence of that span (question slots beyond a passage's count stay 0: ignored)."""
    ids = torch.randint(110, config.vocab_size, (n, S))
    ids[:, 0], ids[:, -1] = 101, 102
    attn = torch.ones(n, S, dtype=torch.long)
    qpos = torch.zeros(n, n_questions, dtype=torch.long)
    starts = torch.zeros(n, n_questions, dtype=torch.long)
    ends = torch.zeros(n, n_questions, dtype=torch.long)
    for i in range(n):
        used = int(torch.randint(S // 2, S + 1, ()).item())
        attn[i, used:] = 0
        ids[i, used:] = 0
        ids[i, used - 1] = 102
        k = int(torch.randint(1, n_questions + 1, ()).item())
        slots = torch.randperm((used - 2) // 8)[: 2 * k] * 8 + 1
        for q in range(min(k, len(slots) // 2)):
            where, answer = int(slots[2 * q]), int(slots[2 * q + 1])
            ids[i, where] = config.question_token_id
            qpos[i, q] = where
            starts[i, q] = answer
            ends[i, q] = answer + int(torch.randint(0, 6, ()).item())
    return ids, attn, qpos, starts, ends


pre = SplinterForPreTraining(config).to(device)
optimizer = torch.optim.AdamW(pre.parameters(), lr=5e-5, weight_decay=0.01)
schedule = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=10)
scaler = torch.amp.GradScaler(device, init_scale=2.0**10, enabled=device == "cuda")
report("built")

pre.train()
for step in range(3):
    ids, attn, qpos, starts, ends = (t.to(device) for t in passages(B, Q))
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        out = pre(input_ids=ids, attention_mask=attn, question_positions=qpos, start_positions=starts,
                  end_positions=ends)
    scaler.scale(out.loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(pre.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"pretrain step {step} loss {out.loss.item():.4f} scale {scaler.get_scale()}")
    del out, ids, attn, qpos, starts, ends
    if step == 0:
        report("pretrain0")
report("pretrain1-2")

qa = SplinterForQuestionAnswering(config).to(device)
missing = qa.load_state_dict(pre.state_dict(), strict=False)
print(f"copied; missing {len(missing.missing_keys)} unexpected {len(missing.unexpected_keys)}")
del pre, optimizer, schedule
qa_opt = torch.optim.SGD(qa.parameters(), lr=1e-3, momentum=0.9, nesterov=True)
qa.train()
for step in range(2):
    ids, attn, qpos, starts, ends = passages(B_QA, 1)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        out = qa(input_ids=ids.to(device), attention_mask=attn.to(device),
                 start_positions=starts[:, 0].to(device), end_positions=ends[:, 0].to(device))
    scaler.scale(out.loss).backward()
    scaler.step(qa_opt)
    scaler.update()
    qa_opt.zero_grad(set_to_none=True)
    print(f"qa step {step} loss {out.loss.item():.4f}")
    del out
report("qa-finetune")

qa.half().eval()
del qa_opt
with torch.inference_mode():
    ids, attn, qpos, starts, ends = (t.to(device) for t in passages(B_DEC, 1))
    out = qa(input_ids=ids, attention_mask=attn)
    start_top, start_idx = out.start_logits.float().topk(20, dim=-1)
    end_top, end_idx = out.end_logits.float().topk(20, dim=-1)
    scores = start_top[:, :, None] + end_top[:, None, :]
    length = end_idx[:, None, :] - start_idx[:, :, None]
    valid = (length >= 0) & (length < MAX_SPAN)
    scores = scores.masked_fill(~valid, float("-inf"))
    best = scores.flatten(1).argmax(-1)
    best_start = start_idx.gather(1, (best // 20)[:, None]).squeeze(1)
    best_end = end_idx.gather(1, (best % 20)[:, None]).squeeze(1)
    hit = ((best_start == starts[:, 0]) & (best_end == ends[:, 0])).float().mean()
print(f"exact span match {hit.item():.3f}")
report("decode")
