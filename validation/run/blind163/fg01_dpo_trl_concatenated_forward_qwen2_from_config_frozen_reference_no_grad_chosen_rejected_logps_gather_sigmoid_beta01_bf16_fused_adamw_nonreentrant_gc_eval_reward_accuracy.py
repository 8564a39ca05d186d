"""Direct Preference Optimization (Rafailov et al. 2023) written by hand the way TRL's
DPOTrainer.concatenated_forward and get_batch_logps compute it, over an HF Qwen2ForCausalLM built from
its config (Qwen2.5-0.5B's widths: 896 wide, 14 heads with 2 KV heads, 4,864 MLP, the 151,936-token
vocabulary with tied embeddings, 12 layers instead of 24), bf16 weights. The policy trains with
non-reentrant gradient checkpointing (`gradient_checkpointing_enable(use_reentrant=False)`, use_cache
off) and fused AdamW (lr 5e-7, weight decay 0); the reference is a second Qwen2ForCausalLM given the
policy's state_dict, frozen, in eval mode, run under torch.no_grad. Each step takes 8 preference pairs
of a 192-token prompt and 320-token responses right-padded to random lengths (attention masks, labels
-100 over the prompt and the padding), concatenates chosen and rejected into one batch of 16 x 512,
casts the logits to fp32, shifts them, and gathers the label log-probs from log_softmax
(`labels[labels == -100] = 0`, loss mask, summed per sequence); the sigmoid loss with beta 0.1, the
implicit rewards and their accuracy; clip_grad_norm_ 1.0. 3 steps (each its own phase) after the
models' phase, then an evaluation pass over 16 held-out pairs in two chunks under no_grad (rewards,
margins, accuracy); 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import Qwen2Config, Qwen2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16301)
if SMALL:
    config = Qwen2Config(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    B, PROMPT, RESP, STEPS, EVAL_PAIRS = 2, 8, 12, 3, 4
else:
    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=12,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        rope_theta=1000000.0,
        tie_word_embeddings=True,
    )
    B, PROMPT, RESP, STEPS, EVAL_PAIRS = 8, 192, 320, 3, 16
config.use_cache = False
device = "cuda" if torch.cuda.is_available() else "cpu"
BETA, LABEL_PAD, PAD_ID = 0.1, -100, 151643 % config.vocab_size

policy = Qwen2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
ref_model = Qwen2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
ref_model.load_state_dict(policy.state_dict())
ref_model.requires_grad_(False)
ref_model.eval()
optimizer = torch.optim.AdamW(policy.parameters(), lr=5e-7, weight_decay=0.0, fused=device == "cuda")


def make_pairs(n):
    prompt = torch.randint(0, config.vocab_size - 1, (n, PROMPT))
    batch = {}
    for name in ("chosen", "rejected"):
        resp = torch.randint(0, config.vocab_size - 1, (n, RESP))
        lengths = torch.randint(RESP // 2, RESP + 1, (n,))
        keep = torch.arange(RESP)[None, :] < lengths[:, None]
        resp = resp.masked_fill(~keep, PAD_ID)
        ids = torch.cat([prompt, resp], dim=1)
        mask = torch.cat([torch.ones(n, PROMPT, dtype=torch.long), keep.long()], dim=1)
        labels = ids.clone()
        labels[:, :PROMPT] = LABEL_PAD
        labels[mask == 0] = LABEL_PAD
        batch[f"{name}_input_ids"] = ids.to(device)
        batch[f"{name}_attention_mask"] = mask.to(device)
        batch[f"{name}_labels"] = labels.to(device)
    return batch


def concatenated_inputs(batch):
    return {
        "input_ids": torch.cat([batch["chosen_input_ids"], batch["rejected_input_ids"]], dim=0),
        "attention_mask": torch.cat(
            [batch["chosen_attention_mask"], batch["rejected_attention_mask"]], dim=0
        ),
        "labels": torch.cat([batch["chosen_labels"], batch["rejected_labels"]], dim=0),
    }


def get_batch_logps(logits, labels):
    labels = labels[:, 1:].clone()
    logits = logits[:, :-1, :]
    loss_mask = labels != LABEL_PAD
    labels[labels == LABEL_PAD] = 0
    per_token_logps = torch.gather(logits.log_softmax(-1), dim=2, index=labels.unsqueeze(2)).squeeze(2)
    return (per_token_logps * loss_mask).sum(-1)


def concatenated_forward(model, batch):
    len_chosen = batch["chosen_labels"].shape[0]
    cat = concatenated_inputs(batch)
    all_logits = model(
        input_ids=cat["input_ids"], attention_mask=cat["attention_mask"], use_cache=False
    ).logits
    all_logits = all_logits.to(torch.float32)
    all_logps = get_batch_logps(all_logits, cat["labels"])
    chosen_logits = all_logits[:len_chosen]
    rejected_logits = all_logits[len_chosen:]
    return all_logps[:len_chosen], all_logps[len_chosen:], chosen_logits, rejected_logits


def dpo_loss(pc, pr, rc, rr):
    logits = (pc - pr) - (rc - rr)
    losses = -F.logsigmoid(BETA * logits)
    chosen_rewards = BETA * (pc - rc).detach()
    rejected_rewards = BETA * (pr - rr).detach()
    return losses, chosen_rewards, rejected_rewards


if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

policy.train()
for step in range(STEPS):
    batch = make_pairs(B)
    with torch.no_grad():
        ref_chosen, ref_rejected, _, _ = concatenated_forward(ref_model, batch)
    pol_chosen, pol_rejected, chosen_logits, rejected_logits = concatenated_forward(policy, batch)
    losses, chosen_rewards, rejected_rewards = dpo_loss(pol_chosen, pol_rejected, ref_chosen, ref_rejected)
    loss = losses.mean()
    reward_acc = (chosen_rewards > rejected_rewards).float().mean()
    metrics = {
        "logits/chosen": chosen_logits.detach().mean().cpu(),
        "logits/rejected": rejected_logits.detach().mean().cpu(),
    }
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del chosen_logits, rejected_logits
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} acc {reward_acc.item():.2f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del batch, losses, loss, pol_chosen, pol_rejected, ref_chosen, ref_rejected

policy.eval()
eval_batch = make_pairs(EVAL_PAIRS)
accs, margins = [], []
with torch.no_grad():
    for start in range(0, EVAL_PAIRS, EVAL_PAIRS // 2):
        chunk = {k: v[start : start + EVAL_PAIRS // 2] for k, v in eval_batch.items()}
        pc, pr, _, _ = concatenated_forward(policy, chunk)
        rc, rr, _, _ = concatenated_forward(ref_model, chunk)
        _, cr, rj = dpo_loss(pc, pr, rc, rr)
        accs.append((cr > rj).float())
        margins.append(cr - rj)
acc = torch.cat(accs).mean()
margin = torch.cat(margins).mean()
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"eval acc {acc.item():.3f} margin {margin.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
