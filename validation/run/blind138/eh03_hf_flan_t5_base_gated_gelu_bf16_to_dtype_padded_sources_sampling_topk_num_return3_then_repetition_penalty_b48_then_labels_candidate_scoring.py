"""Sequence-to-sequence serving on an HF T5ForConditionalGeneration from a T5Config (Flan-T5-base sizes:
12 + 12 layers of 768, gated-GELU feed-forward of 2,048, untied head, 32,128-token vocabulary) cast
by `.to(dtype=torch.bfloat16)`: 16 right-padded sources of up to 512 tokens sampled with top-k 40 and
temperature 0.9, 3 return sequences each, 16 to 64 new tokens; then 48 sources of up to 128 tokens
sampled with top-p 0.9 and repetition penalty 1.3, 48 new tokens exactly; then the round's 48
candidates scored against their sources under inference_mode with `labels` (pad positions set to
-100, per-sequence log-likelihood from log_softmax in fp32 and `gather`); 4 phases."""

import os

import torch
from transformers import T5Config, T5ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13803)
if SMALL:
    config = T5Config(
        vocab_size=300,
        d_model=32,
        d_kv=8,
        d_ff=48,
        num_layers=2,
        num_heads=4,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
        decoder_start_token_id=0,
    )
    B1, L1, T1, B2, L2, T2 = 2, 16, 6, 4, 8, 5
else:
    config = T5Config(
        vocab_size=32128,
        d_model=768,
        d_kv=64,
        d_ff=2048,
        num_layers=12,
        num_decoder_layers=12,
        num_heads=12,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
        decoder_start_token_id=0,
    )
    B1, L1, T1, B2, L2, T2 = 16, 512, 64, 48, 128, 48
device = "cuda" if torch.cuda.is_available() else "cpu"
model = T5ForConditionalGeneration(config).to(device)
model = model.to(dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def sources(b, length):
    n = torch.randint(length // 4, length + 1, (b,))
    n[0] = length
    ids = torch.randint(3, config.vocab_size, (b, length))
    mask = (torch.arange(length)[None, :] < n[:, None]).long()
    ids = ids.masked_fill(mask == 0, config.pad_token_id)
    ids[torch.arange(b), n - 1] = config.eos_token_id
    return ids.to(device), mask.to(device)


src, src_mask = sources(B1, L1)
out1 = model.generate(
    input_ids=src,
    attention_mask=src_mask,
    do_sample=True,
    top_k=40,
    temperature=0.9,
    num_return_sequences=3,
    max_new_tokens=T1,
    min_new_tokens=T1 // 4,
)
print(f"round 1 {tuple(out1.shape)}")
if device == "cuda":
    print(f"round1 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

src, src_mask = sources(B2, L2)
out2 = model.generate(
    input_ids=src,
    attention_mask=src_mask,
    do_sample=True,
    top_k=0,
    top_p=0.9,
    repetition_penalty=1.3,
    max_new_tokens=T2,
    min_new_tokens=T2,
)
print(f"round 2 {tuple(out2.shape)}")
if device == "cuda":
    print(f"round2 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

labels = out2[:, 1:].clone()
labels[labels == config.pad_token_id] = -100
with torch.inference_mode():
    logits = model(input_ids=src, attention_mask=src_mask, labels=labels).logits
    logp = torch.log_softmax(logits.float(), dim=-1)
    tok = logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    ll = (tok * (labels != -100)).sum(-1)
print(f"scored {tuple(ll.shape)} best {ll.max().item():.2f}")
if device == "cuda":
    print(f"score peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
