"""Log anomaly detection in the manner of LogBERT (Guo et al. 2021): sequences of parsed log keys (a vocabulary of
4,096 templates) modelled by a transformers BertForMaskedLM built from a BertConfig (6 layers, hidden 512,
8 heads, 512 positions; nothing downloaded). Training masks 15 % of the keys (labels -100 elsewhere) and adds
the volume-of-hypersphere loss: the final [CLS]-position hidden state (output_hidden_states=True) is pulled
towards a centre kept as a running mean of the batch's [CLS] vectors under no_grad.

Phases: 3 steps at batch 64 x 512 keys in fp32 with AdamW (masked-key cross-entropy + 0.1 x hypersphere
loss); scoring under inference_mode of 256 padded sequences at batch 128 with an attention mask (lengths
128 to 512; SDPA with the padding mask), each masked key counted as a miss when the true key is not in the
top 16 predictions (torch.topk over the vocabulary), a sequence's score = misses + distance of its [CLS] to
the centre; then gradient checkpointing (gradient_checkpointing_enable) under bf16 autocast at batch 128
with foreach AdamW, 3 steps. 3 phases."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import BertConfig, BertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2195)
device = "cuda" if torch.cuda.is_available() else "cpu"
VOCAB, SEQ = 4096, (64 if SMALL else 512)
BATCH, EVAL_N, EVAL_BATCH, CKPT_BATCH = (4, 8, 4, 8) if SMALL else (64, 256, 128, 128)
MASK_ID, PAD_ID, CLS_ID = 3, 0, 1
TOP_G, NU = 16, 0.1


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


config = BertConfig(
    vocab_size=VOCAB,
    hidden_size=128 if SMALL else 512,
    num_hidden_layers=2 if SMALL else 6,
    num_attention_heads=8,
    intermediate_size=512 if SMALL else 2048,
    max_position_embeddings=SEQ,
    pad_token_id=PAD_ID,
)
model = BertForMaskedLM(config).to(device)
center = torch.zeros(config.hidden_size, device=device)


def log_batch(n):
    keys = torch.randint(4, VOCAB, (n, SEQ), device=device)
    keys[:, 0] = CLS_ID
    masked = (torch.rand(n, SEQ, device=device) < 0.15) & (keys != CLS_ID)
    labels = torch.where(masked, keys, torch.full_like(keys, -100))
    inputs = torch.where(masked, torch.full_like(keys, MASK_ID), keys)
    return inputs, labels


def train_step(inputs, labels, opt):
    global center
    out = model(input_ids=inputs, labels=labels, output_hidden_states=True)
    cls = out.hidden_states[-1][:, 0].float()
    with torch.no_grad():
        center = 0.9 * center + 0.1 * cls.mean(0)
    loss = out.loss + NU * ((cls - center) ** 2).sum(1).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


# 1. fp32 AdamW
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
model.train()
for step in range(3):
    loss = train_step(*log_batch(BATCH), opt)
print(f"logbert loss {loss.item():.4f}")
report("logbert fp32 adamw")

# 2. scoring padded sequences
model.eval()
with torch.inference_mode():
    scores = []
    for i in range(EVAL_N // EVAL_BATCH):
        inputs, labels = log_batch(EVAL_BATCH)
        lengths = torch.randint(SEQ // 4, SEQ + 1, (EVAL_BATCH,), device=device)
        attn = (torch.arange(SEQ, device=device)[None, :] < lengths[:, None]).long()
        inputs = inputs.masked_fill(attn == 0, PAD_ID)
        labels = labels.masked_fill(attn == 0, -100)
        out = model(input_ids=inputs, attention_mask=attn, output_hidden_states=True)
        top = out.logits.topk(TOP_G, dim=-1).indices
        hit = (top == labels.clamp_min(0)[..., None]).any(-1)
        misses = ((labels != -100) & ~hit).sum(1)
        dist = ((out.hidden_states[-1][:, 0] - center) ** 2).sum(1)
        scores.append(misses.float() + dist)
    scores = torch.cat(scores)
print(f"anomaly scores mean {scores.mean().item():.4f}")
report("padded topk scoring")

# 3. gradient checkpointing, bf16 autocast, foreach AdamW
del opt
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")
for step in range(3):
    inputs, labels = log_batch(CKPT_BATCH)
    with torch.autocast(**amp):
        loss = train_step(inputs, labels, opt)
print(f"logbert ckpt bf16 loss {loss.item():.4f}")
report("checkpointing bf16 foreach adamw")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
