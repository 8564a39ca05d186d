"""SQuAD-2-style question answering with XLNet's beam-search head, as the Hugging Face XLNet QA examples do,
with the weights random: an XLNetForQuestionAnswering from an XLNetConfig (xlnet-base sizes: 768 wide, 12
layers of two-stream-capable relative attention by einsum, start_n_top = end_n_top = 5, mem_len 384). Each
sequence is a 64-token question then the context, XLNet's CLS last; `p_mask` masks the question out of the
span logits (the CLS stays open: it is the answer of the impossible questions).

Phases: 0 the model in fp32; 1 fine-tuning at batch 8 of 512 tokens under bf16 autocast with fused AdamW, 2
steps, with start/end positions, `cls_index` and `is_impossible` (the answer-class head's BCE loss too); 2 the
model `.half()` and eval, `inference_mode`, two batches of 16 x 512 through the beam head (its top-5 starts,
top-5 x 5 ends and the answer-class logits kept; the eval `mems` it returns dropped); 3 the bare XLNetModel
(`model.transformer`, fp16) reads 4 documents of 2,048 tokens as 4 segments of 512 with segment-level
recurrence (`use_mems=True`, each segment's `mems` fed to the next, 384 positions kept per layer), the first
position of every segment kept. Seeded; no shape depends on values."""

import os

import torch
from transformers import XLNetConfig, XLNetForQuestionAnswering

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3622)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = XLNetConfig(vocab_size=200, d_model=32, n_layer=2, n_head=2, d_inner=64, mem_len=12)
    B1, B2, L, Q, B3, SEGMENTS = 2, 3, 64, 8, 2, 3
else:
    config = XLNetConfig(vocab_size=32000, d_model=768, n_layer=12, n_head=12, d_inner=3072, mem_len=384)
    B1, B2, L, Q, B3, SEGMENTS = 8, 16, 512, 64, 4, 4


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


def make_batch(batch, dtype):
    ids = torch.randint(10, config.vocab_size, (batch, L), device=device)
    ids[:, Q - 1] = 4  # <sep>
    ids[:, -1] = 3  # <cls>
    token_type_ids = torch.zeros_like(ids)
    token_type_ids[:, Q:] = 1
    token_type_ids[:, -1] = 2
    p_mask = torch.zeros(batch, L, device=device, dtype=dtype)
    p_mask[:, :Q] = 1.0
    return ids, token_type_ids, p_mask


model = XLNetForQuestionAnswering(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01, fused=cuda)
print(f"parameters {sum(p.numel() for p in model.parameters()):,}")
report("phase0 xlnet qa fp32")

model.train()
for step in range(2):
    ids, tt, p_mask = make_batch(B1, torch.float32)
    start = torch.randint(Q, L - 40, (B1,), device=device)
    end = start + torch.randint(0, 30, (B1,), device=device)
    impossible = torch.randint(0, 2, (B1,), device=device)
    start = torch.where(impossible.bool(), torch.full_like(start, L - 1), start)
    end = torch.where(impossible.bool(), torch.full_like(end, L - 1), end)
    cls_index = torch.full((B1,), L - 1, device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(
            input_ids=ids,
            token_type_ids=tt,
            attention_mask=torch.ones_like(ids),
            start_positions=start,
            end_positions=end,
            cls_index=cls_index,
            is_impossible=impossible.float(),
            p_mask=p_mask,
        )
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out
report(f"phase1 bf16 autocast fused adamw batch {B1}x{L}")

del optimizer
model.half().eval()
kept = []
with torch.inference_mode():
    for batch in range(2):
        ids, tt, p_mask = make_batch(B2, torch.float16)
        out = model(input_ids=ids, token_type_ids=tt, attention_mask=torch.ones_like(ids), p_mask=p_mask)
        kept.append((out.start_top_index, out.end_top_index, out.start_top_log_probs, out.cls_logits))
        shapes = tuple(out.start_top_index.shape), tuple(out.end_top_index.shape)
        print(f"eval batch {batch} start_top {shapes[0]} end_top {shapes[1]}")
        del out
report(f"phase2 fp16 half eval beam top-k spans 2 batches of {B2}x{L}")

del kept
firsts = []
with torch.inference_mode():
    docs = torch.randint(10, config.vocab_size, (B3, SEGMENTS * L), device=device)
    mems = None
    for seg in range(SEGMENTS):
        piece = docs[:, seg * L : (seg + 1) * L]
        out = model.transformer(input_ids=piece, mems=mems, use_mems=True)
        mems = out.mems
        firsts.append(out.last_hidden_state[:, 0])
        print(f"segment {seg} mems {len(mems)} x {tuple(mems[0].shape)}")
        del out
    summary = torch.stack(firsts, dim=1)
    print(f"summary {tuple(summary.shape)} {summary.dtype}")
report(f"phase3 fp16 segment recurrence {B3} docs x {SEGMENTS} segments of {L} mem_len {config.mem_len}")
