"""Longformer (Beltagy et al. 2020) from a transformers LongformerConfig: masked-language-model
pretraining on 4,096-token documents with sliding-window local attention (window 512, the banded
"sliding chunks" implementation) plus global attention on the <s> token, then a document classifier.

Model: LongformerForMaskedLM(LongformerConfig(vocab 50,265, hidden 768, 6 layers, 12 heads,
intermediate 3,072, attention_window 512, max_position_embeddings 4,098)), random init, fp32 weights,
gradient checkpointing (use_reentrant=False). MLM data: 15% of the 4,096 positions masked on the device
(80% <mask>, 10% random, 10% kept), labels -100 elsewhere; global_attention_mask 1 on position 0; batch
4 under bf16 autocast; torch.optim.Adafactor (lr 1e-2, the factored second moments of PyTorch's
implementation).

Phases: the first step; 2 more steps; MLM evaluation under torch.inference_mode at 4 x 4,096 with bf16
autocast and accuracy over the masked positions; then LongformerForSequenceClassification (same config,
4 labels, global attention on <s>) trained in fp32 without checkpointing, 2 steps at 4 x 2,048 with SGD
momentum 0.9, then deleted together with its optimizer. 4 phases."""

import os

import torch
from transformers import LongformerConfig, LongformerForMaskedLM, LongformerForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19506)
if SMALL:
    cfg = dict(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        attention_window=32,
        max_position_embeddings=258,
    )
    B, SEQ, STEPS, EVAL_B, CLS_B, CLS_SEQ = 2, 256, 1, 2, 2, 128
else:
    cfg = dict(
        vocab_size=50265,
        hidden_size=768,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=3072,
        attention_window=512,
        max_position_embeddings=4098,
    )
    B, SEQ, STEPS, EVAL_B, CLS_B, CLS_SEQ = 4, 4096, 2, 4, 4, 2048
MASK_ID, BOS_ID, PAD_ID = 4, 0, 1
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

config = LongformerConfig(**cfg, pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=2)
model = LongformerForMaskedLM(config).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.Adafactor(model.parameters(), lr=1e-2)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def mlm_batch(b, seq):
    ids = torch.randint(5, config.vocab_size, (b, seq), device=device)
    ids[:, 0] = BOS_ID
    labels = ids.clone()
    masked = torch.rand(b, seq, device=device) < 0.15
    masked[:, 0] = False
    labels[~masked] = -100
    r = torch.rand(b, seq, device=device)
    ids[masked & (r < 0.8)] = MASK_ID
    rand_pos = masked & (r >= 0.8) & (r < 0.9)
    ids[rand_pos] = torch.randint(5, config.vocab_size, (int(rand_pos.sum()),), device=device)
    glob = torch.zeros(b, seq, dtype=torch.long, device=device)
    glob[:, 0] = 1
    return ids, labels, glob


def mlm_step():
    ids, labels, glob = mlm_batch(B, SEQ)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = model(input_ids=ids, global_attention_mask=glob, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"step 0 mlm loss {mlm_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = mlm_step()
print(f"step {STEPS} mlm loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    ids, labels, glob = mlm_batch(EVAL_B, SEQ)
    logits = model(input_ids=ids, global_attention_mask=glob).logits
    sel = labels != -100
    acc = (logits[sel].argmax(-1) == labels[sel]).float().mean()
print(f"eval masked accuracy {acc.item():.4f} over {int(sel.sum())} positions")
del logits
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

clf_config = LongformerConfig(**cfg, pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=2, num_labels=4)
clf = LongformerForSequenceClassification(clf_config).to(device)
clf_opt = torch.optim.SGD(clf.parameters(), lr=1e-3, momentum=0.9)
clf.train()
for step in range(2):
    ids = torch.randint(5, config.vocab_size, (CLS_B, CLS_SEQ), device=device)
    ids[:, 0] = BOS_ID
    y = torch.randint(0, 4, (CLS_B,), device=device)
    glob = torch.zeros_like(ids)
    glob[:, 0] = 1
    out = clf(input_ids=ids, global_attention_mask=glob, labels=y)
    out.loss.backward()
    clf_opt.step()
    clf_opt.zero_grad()
    print(f"classifier step {step} loss {out.loss.item():.4f}")
del clf, clf_opt, out
if device == "cuda":
    print(
        f"classifier allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
