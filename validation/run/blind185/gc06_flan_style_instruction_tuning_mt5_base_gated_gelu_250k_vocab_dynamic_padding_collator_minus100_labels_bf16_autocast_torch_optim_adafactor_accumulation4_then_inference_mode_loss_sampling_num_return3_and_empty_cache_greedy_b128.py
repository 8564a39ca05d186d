"""FLAN-style multilingual instruction tuning (Chung et al. 2022, "Scaling Instruction-Finetuned Language
Models") of an mT5-base-sized model (Xue et al. 2021), an MT5ForConditionalGeneration built from an
MT5Config with no downloads: d_model 768, 12 encoder and 12 decoder layers, 12 heads of 64, gated-GELU
FFN 2,048, vocabulary 250,112, untied lm_head, relative attention bias, dropout 0.1. Instruction/answer
pairs of mixed lengths (instructions 32 to 512 tokens, answers 4 to 128) sampled on the host, padded by a
DataCollatorForSeq2Seq-like collator to the longest in each micro-batch (pad 0 with an attention mask,
labels padded with -100, shifted right by the model). bf16 autocast over fp32 weights and
torch.optim.Adafactor (lr 1e-3, PyTorch's own), 4 micro-batches of 16 per optimizer step: the first step
its own phase, then 2 steps; then model.eval(): the loss under torch.inference_mode at batch 32; a sampled
`generate()` (do_sample, temperature 0.7, top_p 0.95, num_return_sequences 3, 32 new tokens with
min_new_tokens 32) at batch 16 in bf16 autocast; then the optimizer dropped, torch.cuda.empty_cache(), and
greedy `generate()` of 24 new tokens at batch 128 (zero-shot evaluation sweep); 5 phases."""

import gc
import os

import torch
from transformers import MT5Config, MT5ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18506)
if SMALL:
    D, FF, L, H, VOCAB = 64, 128, 2, 4, 1000
    MICRO, ACCUM, STEPS, EVAL_B, SAMPLE_B, SWEEP_B, SRC, TGT, GEN, SWEEP_GEN = 2, 2, 2, 2, 2, 4, 48, 12, 5, 4
else:
    D, FF, L, H, VOCAB = 768, 2048, 12, 12, 250112
    MICRO, ACCUM, STEPS, EVAL_B, SAMPLE_B, SWEEP_B, SRC, TGT, GEN, SWEEP_GEN = (
        16,
        4,
        3,
        32,
        16,
        128,
        512,
        128,
        32,
        24,
    )
device = "cuda" if torch.cuda.is_available() else "cpu"
PAD, EOS = 0, 1

config = MT5Config(
    vocab_size=VOCAB,
    d_model=D,
    d_kv=64 if not SMALL else 16,
    d_ff=FF,
    num_layers=L,
    num_decoder_layers=L,
    num_heads=H,
    relative_attention_num_buckets=32,
    dropout_rate=0.1,
    feed_forward_proj="gated-gelu",
    tie_word_embeddings=False,
    pad_token_id=PAD,
    eos_token_id=EOS,
    decoder_start_token_id=PAD,
)
model = MT5ForConditionalGeneration(config).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")


def collate(bs):
    """Instruction/answer pairs of random lengths, padded to the longest like DataCollatorForSeq2Seq."""
    src_len = torch.randint(32, SRC + 1, (bs,))
    tgt_len = torch.randint(4, TGT + 1, (bs,))
    input_ids = torch.full((bs, int(src_len.max())), PAD, dtype=torch.long)
    labels = torch.full((bs, int(tgt_len.max())), -100, dtype=torch.long)
    for i in range(bs):
        n, m = int(src_len[i]), int(tgt_len[i])
        input_ids[i, : n - 1] = torch.randint(2, VOCAB - 100, (n - 1,))
        input_ids[i, n - 1] = EOS
        labels[i, : m - 1] = torch.randint(2, VOCAB - 100, (m - 1,))
        labels[i, m - 1] = EOS
    attention_mask = (input_ids != PAD).long()
    return input_ids.to(device), attention_mask.to(device), labels.to(device)


optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    for _micro in range(ACCUM):
        input_ids, attention_mask, labels = collate(MICRO)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss / ACCUM
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item() * ACCUM:.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    input_ids, attention_mask, labels = collate(EVAL_B)
    val_loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
print(f"val loss {val_loss.item():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    samples = model.generate(
        input_ids=input_ids[:SAMPLE_B],
        attention_mask=attention_mask[:SAMPLE_B],
        do_sample=True,
        temperature=0.7,
        top_p=0.95,
        num_return_sequences=3,
        max_new_tokens=GEN,
        min_new_tokens=GEN,
    )
print(f"samples {tuple(samples.shape)}")
if device == "cuda":
    print(f"sample peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del optimizer, samples
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    input_ids, attention_mask, _ = collate(SWEEP_B)
    answers = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        do_sample=False,
        max_new_tokens=SWEEP_GEN,
        min_new_tokens=SWEEP_GEN,
    )
print(f"sweep {tuple(answers.shape)}")
if device == "cuda":
    print(
        f"sweep allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
