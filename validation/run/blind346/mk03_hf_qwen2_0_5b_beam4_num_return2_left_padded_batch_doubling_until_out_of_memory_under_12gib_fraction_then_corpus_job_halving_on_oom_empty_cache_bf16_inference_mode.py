"""Batch generation job around HF `generate()` without a serving framework, the batch size found by
trial: a Qwen2ForCausalLM from a Qwen2Config (0.5B sizes: 896 hidden, 24 layers, 14 heads, 2 KV heads,
151,936-token vocabulary) in bf16, the process capped at 12 GiB by
`torch.cuda.set_per_process_memory_fraction` (the share other jobs leave on the card); beam search
(`num_beams=4`, `num_return_sequences=2`, 40 new tokens, `min_new_tokens` equal) on left-padded
prompts of 256 tokens at batch 16, 32, 64, ... doubling until `torch.OutOfMemoryError` (or 512),
`torch.cuda.empty_cache()` after the failure; then a corpus of 1,536 prompts of 64 to 256 tokens,
sorted by length, generated at half the first failing batch, halving again whenever a chunk runs out
of memory; all under torch.inference_mode; 3 phases."""

import os

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34603)
if SMALL:
    config = Qwen2Config(
        vocab_size=512,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    PROMPT, NEW, START, MAX_BATCH, N_CORPUS, MIN_LEN = 32, 6, 2, 8, 24, 8
else:
    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    PROMPT, NEW, START, MAX_BATCH, N_CORPUS, MIN_LEN = 256, 40, 16, 512, 1536, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(12 * 2**30 / total)
model = Qwen2ForCausalLM(config).to(torch.bfloat16).to(device).eval()
gen_kwargs = dict(
    num_beams=4,
    num_return_sequences=2,
    max_new_tokens=NEW,
    min_new_tokens=NEW,
    do_sample=False,
    pad_token_id=0,
    eos_token_id=1,
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def left_padded(lengths):
    L = max(lengths)
    ids = torch.zeros(len(lengths), L, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, n in enumerate(lengths):
        ids[r, L - n :] = torch.randint(2, config.vocab_size, (n,))
        mask[r, L - n :] = 1
    return ids.to(device), mask.to(device)


def generate(lengths):
    ids, mask = left_padded(lengths)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, **gen_kwargs)
    return out[:, ids.shape[1] :].cpu()


batch, failed = START, None
while batch <= MAX_BATCH:
    oom = False
    try:
        out = generate([PROMPT] * batch)
        print(f"batch {batch} ok, {out.shape[0]} sequences")
        del out
    except torch.OutOfMemoryError:
        oom = True
    if oom:
        print(f"batch {batch} out of memory")
        failed = batch
        if device == "cuda":
            torch.cuda.empty_cache()
        break
    batch *= 2
best = (failed or 2 * MAX_BATCH) // 2
print(f"chosen batch {best}")
if device == "cuda":
    print(f"search peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    print(f"ooms {torch.cuda.memory_stats().get('num_ooms', 0)}")
    torch.cuda.reset_peak_memory_stats()

corpus = torch.randint(MIN_LEN, PROMPT + 1, (N_CORPUS,), generator=torch.Generator().manual_seed(5))
corpus = sorted(corpus.tolist())
done, chunk, results = 0, best, []
while done < N_CORPUS:
    oom = False
    try:
        results.append(generate(corpus[done : done + chunk]))
        done += min(chunk, N_CORPUS - done)
    except torch.OutOfMemoryError:
        oom = True
    if oom:
        chunk = max(1, chunk // 2)
        print(f"out of memory at {done}, chunk now {chunk}")
        if device == "cuda":
            torch.cuda.empty_cache()
total_seqs = sum(r.shape[0] for r in results)
print(f"corpus done: {total_seqs} sequences in {len(results)} chunks, final chunk size {chunk}")
if device == "cuda":
    print(f"corpus peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    print(f"ooms {torch.cuda.memory_stats().get('num_ooms', 0)}")
