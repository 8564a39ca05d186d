"""Long-context prefill in chunks, then decoding by hand, on an HF Qwen3ForCausalLM from a Qwen3Config
(Qwen3-1.7B sizes: 28 layers of 2,048, 16 query heads over 8 key/value heads of 128 with q/k
RMSNorm, MLP of 6,144, 151,936-token vocabulary tied to the head) built in bf16 under
`torch.set_default_dtype`, no `generate`: one prompt of 12,288 tokens fed in chunks of 2,048 into a
DynamicCache with `logits_to_keep=1`, then 64 tokens sampled by hand (temperature 0.7, top-k 50
by `topk`, top-p 0.9 by `sort`/`cumsum`/`scatter`, `multinomial`); then 4 prompts of 3,072 tokens
in chunks of 1,024 with the full logits kept (bf16, the last position's taken in fp32) and 48
greedy tokens under a repetition penalty applied by `gather`/`scatter_` over the tokens seen;
then the first prompt's cache cropped back to 8,192 tokens (`DynamicCache.crop`) and a branch
of 32 greedy tokens decoded from there; all under inference_mode; 4 phases."""

import os

import torch
from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13805)
if SMALL:
    config = Qwen3Config(
        vocab_size=500,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
    )
    L1, C1, T1, B2, L2, C2, T2, CROP, T3 = 96, 32, 6, 2, 48, 16, 5, 64, 4
else:
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
    )
    L1, C1, T1, B2, L2, C2, T2, CROP, T3 = 12288, 2048, 64, 4, 3072, 1024, 48, 8192, 32
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.set_default_dtype(torch.bfloat16)
with torch.device(device):
    model = Qwen3ForCausalLM(config).eval()
torch.set_default_dtype(torch.float32)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def sample(logits, temperature=0.7, top_k=50, top_p=0.9):
    logits = logits.float() / temperature
    v, _ = torch.topk(logits, top_k)
    logits = logits.masked_fill(logits < v[:, -1:], float("-inf"))
    sorted_logits, sorted_idx = torch.sort(logits, descending=True)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    drop = cum > top_p
    drop[:, 1:] = drop[:, :-1].clone()
    drop[:, 0] = False
    logits = logits.masked_fill(drop.scatter(1, sorted_idx, drop), float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1)


with torch.inference_mode():
    prompt = torch.randint(0, config.vocab_size, (1, L1), device=device)
    cache = DynamicCache()
    for s in range(0, L1, C1):
        out = model(input_ids=prompt[:, s : s + C1], past_key_values=cache, use_cache=True, logits_to_keep=1)
    tok = sample(out.logits[:, -1])
    text = [tok]
    for _ in range(T1 - 1):
        out = model(input_ids=tok, past_key_values=cache, use_cache=True)
        tok = sample(out.logits[:, -1])
        text.append(tok)
    text = torch.cat(text, 1)
print(f"sampled {tuple(text.shape)} cache {cache.get_seq_length()}")
if device == "cuda":
    print(f"long peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    prompts = torch.randint(0, config.vocab_size, (B2, L2), device=device)
    cache2 = DynamicCache()
    for s in range(0, L2, C2):
        out = model(input_ids=prompts[:, s : s + C2], past_key_values=cache2, use_cache=True)
        last = out.logits[:, -1].float()
    seen = prompts
    for _ in range(T2):
        scores = torch.gather(last, 1, seen)
        scores = torch.where(scores < 0, scores * 1.2, scores / 1.2)
        last = last.scatter_(1, seen, scores)
        tok = last.argmax(-1, keepdim=True)
        seen = torch.cat([seen, tok], 1)
        out = model(input_ids=tok, past_key_values=cache2, use_cache=True)
        last = out.logits[:, -1].float()
    del out, last, cache2
print(f"batch {tuple(seen.shape)}")
if device == "cuda":
    print(f"batch peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    cache.crop(CROP - cache.get_seq_length())
    tok = prompt[:, CROP : CROP + 1]
    branch = []
    for _ in range(T3):
        out = model(input_ids=tok, past_key_values=cache, use_cache=True)
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        branch.append(tok)
    branch = torch.cat(branch, 1)
print(f"branch {tuple(branch.shape)} cache {cache.get_seq_length()}")
if device == "cuda":
    print(f"branch peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
