"""ORPO (Hong et al. 2024, "Monolithic Preference Optimization without Reference Model") written by
hand the way TRL's ORPOTrainer computes it, over an HF Phi3ForCausalLM built from its config (fused
qkv_proj and gate_up_proj, 1,536 wide, 10 layers, 16 heads, 4,096 MLP, the 32,064-token vocabulary,
untied embeddings), fp32 weights under bf16 autocast, torch.optim.AdamW fused (lr 8e-6, weight
decay 0) with a linear-warmup cosine schedule by LambdaLR, gradient accumulation over 2
micro-batches, clip_grad_norm_ 1.0, no reference model. Each micro-batch: 8 preference pairs of a
128-token prompt and 384-token responses right-padded (pad id 32000) to random lengths, chosen and
rejected concatenated into 16 x 512; the NLL on the chosen half by CrossEntropyLoss over the shifted
logits (labels -100 over the prompt and the padding), the length-averaged log-probs of both halves
by log_softmax and gather, the log odds ratio (log1p(-exp(.)) terms), beta 0.1 * logsigmoid; 3
optimizer steps (each its own phase) after the model's phase, then an evaluation of sampled
completions: `generate()` under inference_mode and bf16 autocast over 16 prompts of 128 tokens with
do_sample, top_k 50, temperature 0.7, max_new_tokens = min_new_tokens = 128 (the end of sequence
cannot come first, so every completion is 128 tokens) and the KV cache; 5 phases."""

import math
import os

import torch
import torch.nn.functional as F
from transformers import Phi3Config, Phi3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16306)
if SMALL:
    config = Phi3Config(
        vocab_size=32064, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=256, tie_word_embeddings=False,
    )  # fmt: skip
    PAIRS, PROMPT, RESP, ACCUM, STEPS, EVAL_B, NEW = 2, 8, 8, 2, 3, 2, 8
else:
    config = Phi3Config(
        vocab_size=32064,
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=10,
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    PAIRS, PROMPT, RESP, ACCUM, STEPS, EVAL_B, NEW = 8, 128, 384, 2, 3, 16, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
BETA, PAD, WARMUP, TOTAL = 0.1, 32000, 2, 100

model = Phi3ForCausalLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=8e-6, weight_decay=0.0, fused=device == "cuda")


def lr_lambda(step):
    if step < WARMUP:
        return float(step + 1) / float(WARMUP)
    progress = float(step - WARMUP) / float(max(1, TOTAL - WARMUP))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def make_batch(n):
    prompt = torch.randint(1, 32000, (n, PROMPT))
    ids, labels, masks = [], [], []
    for _ in ("chosen", "rejected"):
        resp = torch.randint(1, 32000, (n, RESP))
        lengths = torch.randint(RESP // 3, RESP + 1, (n,))
        keep = torch.arange(RESP)[None, :] < lengths[:, None]
        seq = torch.cat([prompt, resp.masked_fill(~keep, PAD)], dim=1)
        lab = torch.cat([torch.full((n, PROMPT), -100), resp.masked_fill(~keep, -100)], dim=1)
        ids.append(seq)
        labels.append(lab)
        masks.append(torch.cat([torch.ones(n, PROMPT, dtype=torch.long), keep.long()], dim=1))
    return torch.cat(ids).to(device), torch.cat(masks).to(device), torch.cat(labels).to(device)


def get_batch_logps(logits, labels, average_log_prob=True):
    labels = labels[:, 1:].clone()
    logits = logits[:, :-1, :]
    loss_mask = labels != -100
    labels[labels == -100] = 0
    per_token_logps = torch.gather(logits.log_softmax(-1), dim=2, index=labels.unsqueeze(2)).squeeze(2)
    if average_log_prob:
        return (per_token_logps * loss_mask).sum(-1) / loss_mask.sum(-1)
    return (per_token_logps * loss_mask).sum(-1)


def odds_ratio_loss(chosen_logps, rejected_logps):
    log_odds = (chosen_logps - rejected_logps) - (
        torch.log1p(-torch.exp(chosen_logps)) - torch.log1p(-torch.exp(rejected_logps))
    )
    ratio = F.logsigmoid(log_odds)
    return BETA * ratio, torch.mean(ratio), torch.mean(log_odds)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    for _micro in range(ACCUM):
        ids, mask, labels = make_batch(PAIRS)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            all_logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            chosen_logits = all_logits[:PAIRS]
            shift_logits = chosen_logits[..., :-1, :].contiguous()
            shift_labels = labels[:PAIRS, 1:].contiguous()
            nll = torch.nn.CrossEntropyLoss()(
                shift_logits.view(-1, shift_logits.shape[-1]), shift_labels.view(-1)
            )
            all_logps = get_batch_logps(all_logits.float(), labels)
            chosen_logps, rejected_logps = all_logps[:PAIRS], all_logps[PAIRS:]
            losses, log_odds_ratio, log_odds_chosen = odds_ratio_loss(chosen_logps, rejected_logps)
            loss = nll - losses.mean()
        (loss / ACCUM).backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} nll {nll.item():.4f} log_odds {log_odds_chosen.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del all_logits, chosen_logits, shift_logits, all_logps, loss, nll, losses

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    prompts = torch.randint(1, 32000, (EVAL_B, PROMPT), device=device)
    out = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=True,
        top_k=50,
        temperature=0.7,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        pad_token_id=PAD,
    )
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"generate {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
