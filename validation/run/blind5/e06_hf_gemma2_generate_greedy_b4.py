"""HF `generate()` on a Gemma2ForCausalLM built from a gemma-2-2b-sized Gemma2Config (2304 wide, 26 layers,
8 query / 4 KV heads of 256, sliding window 4096 on alternate layers, logit soft-capping, 256k vocab, tied
embeddings) in bf16: batch 4 of left-padded prompts (up to 700 tokens) with an attention mask, greedy
(`do_sample=False`), `max_new_tokens=64`; then a second call at batch 1; tokens moved to the host."""

import os

import torch
from transformers import Gemma2Config, Gemma2ForCausalLM

HID, INTER, LAYERS, HEADS, KV, HEAD_DIM, VOCAB, B, PROMPT, NEW = (
    (64, 128, 2, 4, 2, 16, 512, 4, 24, 8)
    if os.environ.get("SMOKE")
    else (2304, 9216, 26, 8, 4, 256, 256000, 4, 700, 64)
)
PAD = 0
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(506)

config = Gemma2Config(
    vocab_size=VOCAB,
    hidden_size=HID,
    intermediate_size=INTER,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    head_dim=HEAD_DIM,
    max_position_embeddings=8192,
    sliding_window=4096,
    pad_token_id=PAD,
    bos_token_id=2,
    eos_token_id=1,
    tie_word_embeddings=True,
)
model = Gemma2ForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
print(f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

lengths = torch.tensor([PROMPT, PROMPT - PROMPT // 4, PROMPT // 2, PROMPT // 3])[:B]
ids = torch.randint(3, VOCAB, (B, PROMPT))
mask = (torch.arange(PROMPT)[None, :] >= (PROMPT - lengths)[:, None]).long()
ids = ids.masked_fill(mask == 0, PAD)
ids[torch.arange(B), PROMPT - lengths] = 2
ids, mask = ids.to(device), mask.to(device)

out = model.generate(
    input_ids=ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=PAD
)
tokens = out[:, PROMPT:].cpu()
print(f"generated {tuple(tokens.shape)}")
if device == "cuda":
    print(
        f"generate b{B} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

single = ids[:1]
out = model.generate(
    input_ids=single,
    attention_mask=mask[:1],
    max_new_tokens=NEW,
    do_sample=False,
    pad_token_id=PAD,
)
print(f"generated {tuple(out[:, PROMPT:].cpu().shape)}")
if device == "cuda":
    print(
        f"generate b1 peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
