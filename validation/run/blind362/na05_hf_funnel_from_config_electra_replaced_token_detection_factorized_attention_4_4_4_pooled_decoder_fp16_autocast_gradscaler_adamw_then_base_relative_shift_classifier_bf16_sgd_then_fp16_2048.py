"""Funnel Transformer pretraining with the ELECTRA-style discriminator objective, then its encoder-only base
model as a long-document classifier, as the Hugging Face Funnel examples do, with the weights random: a
FunnelForPreTraining from a FunnelConfig (funnel-transformer/intermediate-like: 3 blocks of 4 layers, 768
wide, the sequence mean-pooled by 2 between blocks with the CLS kept apart and the last token truncated
(`separate_cls`, `truncate_seq`, queries-only pooling), a 2-layer decoder that upsamples back to full length;
attention_type "factorized", relative positions without the shift trick).

Phases: 0 the discriminator in fp32; 1 replaced-token detection at batch 8 of 1,024 tokens (15% of positions
replaced by random ids, 0/1 labels, BCE) under fp16 autocast with a GradScaler (initial scale 1,024) and AdamW
(foreach), 2 steps; 2 a FunnelForSequenceClassification (the encoder-only FunnelBaseModel, no decoder;
attention_type "relative_shift") built from the same sizes, its encoder loaded from the discriminator's
(`load_state_dict(strict=False)`), the discriminator and its optimizer dropped, then fine-tuned at batch 16 of
512 tokens under bf16 autocast with SGD momentum 0.9, 3 steps; 3 the optimizer dropped and the cache emptied
(`torch.cuda.empty_cache()`), the classifier `.half()` and eval under `no_grad`, batch 8 of 2,048 tokens,
probabilities kept. Seeded; no shape depends on values."""

import os

import torch
from transformers import FunnelConfig, FunnelForPreTraining, FunnelForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3625)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    sizes = dict(vocab_size=200, block_sizes=[1, 1, 1], d_model=32, n_head=2, d_head=16, d_inner=64)
    B1, L1, B2, L2, B3, L3 = 2, 32, 2, 16, 2, 64
else:
    sizes = dict(vocab_size=30522, block_sizes=[4, 4, 4], d_model=768, n_head=12, d_head=64, d_inner=3072)
    B1, L1, B2, L2, B3, L3 = 8, 1024, 16, 512, 8, 2048


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


def make_ids(batch, length):
    ids = torch.randint(5, sizes["vocab_size"], (batch, length), device=device)
    ids[:, 0] = 3  # [CLS]
    ids[:, -1] = 4  # [SEP]
    return ids


disc = FunnelForPreTraining(FunnelConfig(attention_type="factorized", **sizes)).to(device)
optimizer = torch.optim.AdamW(disc.parameters(), lr=1e-4, weight_decay=0.01)
scaler = torch.amp.GradScaler(device, init_scale=2.0**10, enabled=cuda)
print(f"parameters {sum(p.numel() for p in disc.parameters()):,}")
report("phase0 funnel discriminator fp32")

disc.train()
for step in range(2):
    ids = make_ids(B1, L1)
    replaced = torch.rand(B1, L1, device=device) < 0.15
    corrupted = torch.where(replaced, torch.randint_like(ids, 5, sizes["vocab_size"]), ids)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=cuda):
        out = disc(input_ids=corrupted, attention_mask=torch.ones_like(ids), labels=replaced.long())
    scaler.scale(out.loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f} scale {scaler.get_scale()}")
    del out
report(f"phase1 fp16 autocast gradscaler adamw replaced token detection batch {B1}x{L1}")

clf = FunnelForSequenceClassification(FunnelConfig(attention_type="relative_shift", num_labels=4, **sizes))
missing, unexpected = clf.funnel.load_state_dict(disc.funnel.state_dict(), strict=False)
print(f"encoder loaded: {len(missing)} missing, {len(unexpected)} unexpected (the decoder)")
clf.to(device).train()
del disc, optimizer, scaler
optimizer = torch.optim.SGD(clf.parameters(), lr=1e-3, momentum=0.9)
for step in range(3):
    ids = make_ids(B2, L2)
    labels = torch.randint(0, 4, (B2,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = clf(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"classifier step {step} loss {out.loss.item():.4f}")
    del out
report(f"phase2 base model relative_shift classifier bf16 autocast sgd momentum batch {B2}x{L2}")

del optimizer
if cuda:
    torch.cuda.empty_cache()
clf.half().eval()
with torch.no_grad():
    ids = make_ids(B3, L3)
    probs = clf(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float().softmax(-1)
    print(f"probs {tuple(probs.shape)}")
report(f"phase3 fp16 half no_grad classifier batch {B3}x{L3}")
