"""Sampling from an HF FalconForCausalLM built from a FalconConfig (Falcon-1B-like: 24 layers of 2,048,
32 query heads over one shared key/value head (multi_query), parallel attention and MLP, no biases,
rotary positions, 65,024-token vocabulary tied to the head) cast by `.to(torch.bfloat16)`: two
serving rounds of `generate(do_sample=True)` on left-padded prompts: 4 prompts of up to 384 tokens
with top-k 50, top-p 0.92, temperature 0.8, repetition penalty 1.15 and 4 return sequences each,
96 new tokens (min_new_tokens = max_new_tokens); then 10 prompts of up to 192 tokens with top-k 20,
temperature 1.1, 2 return sequences, min 32 and max 64 new tokens; then the sampled continuations
rescored in one forward pass for their mean log-probability (log_softmax in fp32 over the
continuation's positions, `gather`); 4 phases."""

import os

import torch
from transformers import FalconConfig, FalconForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13802)
if SMALL:
    config = FalconConfig(
        vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, bos_token_id=11
    )
    B1, L1, T1, B2, L2, T2 = 2, 16, 6, 3, 8, 5
else:
    config = FalconConfig(
        vocab_size=65024,
        hidden_size=2048,
        num_hidden_layers=24,
        num_attention_heads=32,
        multi_query=True,
        parallel_attn=True,
        new_decoder_architecture=False,
        bias=False,
        alibi=False,
        bos_token_id=11,
        eos_token_id=11,
    )
    B1, L1, T1, B2, L2, T2 = 4, 384, 96, 10, 192, 64
config.pad_token_id = config.eos_token_id
device = "cuda" if torch.cuda.is_available() else "cpu"
model = FalconForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def prompts(b, length):
    n = torch.randint(length // 2, length + 1, (b,))
    n[0] = length
    ids = torch.randint(12, config.vocab_size, (b, length))
    mask = (torch.arange(length)[None, :] >= (length - n)[:, None]).long()
    ids = ids.masked_fill(mask == 0, config.pad_token_id)
    return ids.to(device), mask.to(device)


ids, mask = prompts(B1, L1)
out1 = model.generate(
    input_ids=ids,
    attention_mask=mask,
    do_sample=True,
    top_k=50,
    top_p=0.92,
    temperature=0.8,
    repetition_penalty=1.15,
    num_return_sequences=4,
    max_new_tokens=T1,
    min_new_tokens=T1,
    pad_token_id=config.pad_token_id,
)
print(f"round 1 {tuple(out1.shape)}")
if device == "cuda":
    print(f"round1 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

ids, mask = prompts(B2, L2)
out2 = model.generate(
    input_ids=ids,
    attention_mask=mask,
    do_sample=True,
    top_k=20,
    temperature=1.1,
    num_return_sequences=2,
    max_new_tokens=T2,
    min_new_tokens=T2 // 2,
    pad_token_id=config.pad_token_id,
)
print(f"round 2 {tuple(out2.shape)}")
if device == "cuda":
    print(f"round2 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

full_mask = torch.cat([mask.repeat_interleave(2, dim=0), torch.ones_like(out2[:, L2:])], dim=1)
with torch.inference_mode():
    logits = model(input_ids=out2, attention_mask=full_mask).logits[:, L2 - 1 : -1]
    logp = torch.log_softmax(logits.float(), dim=-1)
    tok = logp.gather(-1, out2[:, L2:].unsqueeze(-1)).squeeze(-1)
    score = tok.mean(-1)
print(f"rescored {tuple(score.shape)} best {score.max().item():.3f}")
if device == "cuda":
    print(f"rescore peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
