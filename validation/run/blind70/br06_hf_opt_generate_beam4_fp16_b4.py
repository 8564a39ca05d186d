"""HF OPTForCausalLM from an OPTConfig (opt-1.3b sizes: 24 layers, 2,048 wide) in fp16, beam search
with 4 beams and a length penalty, 4 prompts of 512 tokens, exactly 96 new tokens (no end-of-sequence
stop); 2 phases."""

import os

import torch
from transformers import OPTConfig, OPTForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7006)
if SMALL:
    config = OPTConfig(
        vocab_size=100,
        hidden_size=32,
        ffn_dim=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        word_embed_proj_dim=32,
    )
    B, L, T = 2, 8, 4
else:
    config = OPTConfig(
        vocab_size=50272,
        hidden_size=2048,
        ffn_dim=8192,
        num_hidden_layers=24,
        num_attention_heads=32,
        word_embed_proj_dim=2048,
    )
    B, L, T = 4, 512, 96
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = OPTForCausalLM(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(4, config.vocab_size, (B, L), device=device)
out = model.generate(
    input_ids=ids,
    attention_mask=torch.ones_like(ids),
    num_beams=4,
    length_penalty=0.8,
    do_sample=False,
    max_new_tokens=T,
    min_new_tokens=T,
    eos_token_id=None,
    pad_token_id=1,
)
print(f"generated {tuple(out.shape)}")
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
