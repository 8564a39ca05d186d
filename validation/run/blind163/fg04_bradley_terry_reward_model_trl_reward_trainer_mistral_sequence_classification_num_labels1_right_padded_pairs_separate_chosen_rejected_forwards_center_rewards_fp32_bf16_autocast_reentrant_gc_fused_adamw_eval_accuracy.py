"""A Bradley-Terry reward model (InstructGPT's pairwise loss) trained by hand the way TRL's
RewardTrainer.compute_loss does it, over an HF MistralForSequenceClassification built from its config
(num_labels 1, 1,024 wide, 16 layers, 16 heads with 8 KV heads, 2,816 MLP, a 32,000-token vocabulary,
no sliding window, pad id 0: the score is read at each row's last non-pad token), fp32 weights under
bf16 autocast, reentrant gradient checkpointing (`gradient_checkpointing_enable(use_reentrant=True)`,
which makes the input embeddings require grad), torch.optim.AdamW fused (lr 1e-5, weight decay 0.01)
with a linear warmup by LambdaLR. Each step: 16 pairs of 768-token sequences, right-padded to random
lengths (a shared 256-token prompt, chosen and rejected responses), one forward for the chosen and
one for the rejected batch, loss -logsigmoid(r_chosen - r_rejected - margin) plus 0.01 * the mean of
(r_chosen + r_rejected)^2 (center_rewards_coefficient), clip_grad_norm_ 1.0; 3 steps (each its own
phase) after the model's phase, then an evaluation of 64 pairs in two batches under no_grad with the
chosen and rejected concatenated into one batch of 64 (accuracy, mean margin); 5 phases."""

import os

import torch
import torch.nn as nn
from transformers import MistralConfig, MistralForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16304)
if SMALL:
    config = MistralConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        sliding_window=None,
        num_labels=1,
        pad_token_id=0,
    )
    B, PROMPT, RESP, STEPS, EVAL_PAIRS = 2, 8, 16, 3, 4
else:
    config = MistralConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
        max_position_embeddings=4096,
        sliding_window=None,
        num_labels=1,
        pad_token_id=0,
    )
    B, PROMPT, RESP, STEPS, EVAL_PAIRS = 16, 256, 512, 3, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
CENTER = 0.01

model = MistralForSequenceClassification(config).to(device)
model.config.use_cache = False
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, fused=device == "cuda")
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))


def make_pairs(n):
    prompt = torch.randint(1, config.vocab_size, (n, PROMPT))
    out = {}
    for name in ("chosen", "rejected"):
        resp = torch.randint(1, config.vocab_size, (n, RESP))
        lengths = torch.randint(RESP // 4, RESP + 1, (n,))
        keep = torch.arange(RESP)[None, :] < lengths[:, None]
        ids = torch.cat([prompt, torch.where(keep, resp, torch.zeros_like(resp))], dim=1)
        mask = torch.cat([torch.ones(n, PROMPT, dtype=torch.long), keep.long()], dim=1)
        out[f"input_ids_{name}"] = ids.to(device, non_blocking=True)
        out[f"attention_mask_{name}"] = mask.to(device, non_blocking=True)
    out["margin"] = (torch.rand(n) * 0.5).to(device)
    return out


def compute_loss(model, inputs):
    rewards_chosen = model(
        input_ids=inputs["input_ids_chosen"], attention_mask=inputs["attention_mask_chosen"], return_dict=True
    )["logits"]
    rewards_rejected = model(
        input_ids=inputs["input_ids_rejected"],
        attention_mask=inputs["attention_mask_rejected"],
        return_dict=True,
    )["logits"]
    loss = -nn.functional.logsigmoid(rewards_chosen - rewards_rejected - inputs["margin"][:, None]).mean()
    loss += CENTER * torch.mean((rewards_chosen + rewards_rejected) ** 2)
    return loss, rewards_chosen, rewards_rejected


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    inputs = make_pairs(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss, rc, rr = compute_loss(model, inputs)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    acc = (rc > rr).float().mean()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} acc {acc.item():.2f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del inputs, loss, rc, rr

model.eval()
correct, margins = [], []
with torch.no_grad():
    for _ in range(2):
        ev = make_pairs(EVAL_PAIRS // 2)
        ids = torch.cat([ev["input_ids_chosen"], ev["input_ids_rejected"]])
        am = torch.cat([ev["attention_mask_chosen"], ev["attention_mask_rejected"]])
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            scores = model(input_ids=ids, attention_mask=am).logits.squeeze(-1).float()
        chosen, rejected = scores.chunk(2)
        correct.append(chosen > rejected)
        margins.append(chosen - rejected)
acc = torch.cat(correct).float().mean()
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"eval acc {acc.item():.3f} margin {torch.cat(margins).mean().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
