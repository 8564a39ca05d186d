"""HF MistralForCausalLM from a MistralConfig (1024 wide, 8 layers, 16 heads, 4 key-value heads, sliding
window 512), bf16 weights, beam search generate() with num_beams=4, length_penalty 1.2 and
early_stopping at batch 2, prompt 384, 96 new tokens (min_new_tokens equal), then batch 4 with
num_beams=2; 2 phases."""

import os

import torch
from transformers import MistralConfig, MistralForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1608)
if SMALL:
    config = MistralConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        sliding_window=16,
    )
    BATCH, PROMPT, NEW = 2, 8, 4
else:
    config = MistralConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        sliding_window=512,
    )
    BATCH, PROMPT, NEW = 2, 384, 96
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MistralForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for name, batch, beams in (("beam4", BATCH, 4), ("beam2", BATCH * 2, 2)):
    ids = torch.randint(0, config.vocab_size, (batch, PROMPT), device=device)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            num_beams=beams,
            length_penalty=1.2,
            early_stopping=True,
            do_sample=False,
            pad_token_id=0,
        )
    assert out.shape == (batch, PROMPT + NEW)
    del out
    if device == "cuda":
        print(f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
