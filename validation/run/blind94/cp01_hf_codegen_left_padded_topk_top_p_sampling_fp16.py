"""HF transformers CodeGen (GPT-J-style parallel attention/MLP, partial rotary on 64 of each 128-wide
head, fused qkv) built from a config at 16 layers, 2,048 wide, 16 heads, a 51,200 vocabulary, in
fp16; sampled generation (top-k 40, top-p 0.95, temperature 0.7, multinomial draws on the GPU) of
64 new tokens for a batch of 6 left-padded prompts up to 384 tokens, then a batch of 12 prompts up
to 256 tokens with 2 return sequences each; 3 phases."""

import os

import torch
from transformers import CodeGenConfig, CodeGenForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9401)
TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
if SMALL:
    cfg = CodeGenConfig(
        vocab_size=128, n_positions=256, n_ctx=256, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, **TOKENS
    )
    RUNS, NEW = ((2, 12, 1), (3, 10, 2)), 6
else:
    cfg = CodeGenConfig(
        vocab_size=51200,
        n_positions=2048,
        n_ctx=2048,
        n_embd=2048,
        n_layer=16,
        n_head=16,
        rotary_dim=64,
        **TOKENS,
    )
    RUNS, NEW = ((6, 384, 1), (12, 256, 2)), 64
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = CodeGenForCausalLM(cfg).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for B, L, R in RUNS:
    ids = torch.randint(3, cfg.vocab_size, (B, L), device=device)
    attn = torch.ones_like(ids)
    for i in range(B):
        pad = (i * L) // (3 * B)
        ids[i, :pad] = 0
        attn[i, :pad] = 0
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=attn,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=True,
            top_k=40,
            top_p=0.95,
            temperature=0.7,
            num_return_sequences=R,
            pad_token_id=0,
        )
    if device == "cuda":
        print(
            f"batch {B} prompt {L} out {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, attn, out
