"""HF MistralForCausalLM from a MistralConfig (1024 wide, 8 layers, 16 heads, 4 key-value heads,
sliding window 256), bf16 weights, attn_implementation="eager", inference under torch.no_grad with
output_attentions=True and output_hidden_states=True (every layer's attention weights and hidden
states returned) at batch 4 x 512 tokens, then the same with use_cache=False at batch 8; 2 phases."""

import os

import torch
from transformers import MistralConfig, MistralForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1904)
if SMALL:
    config = MistralConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        sliding_window=8,
    )
    RUNS = ((2, 16, True), (2, 16, False))
else:
    config = MistralConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        sliding_window=256,
    )
    RUNS = ((4, 512, True), (8, 512, False))
config._attn_implementation = "eager"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MistralForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for batch, seq, cache in RUNS:
    ids = torch.randint(0, config.vocab_size, (batch, seq), device=device)
    with torch.no_grad():
        out = model(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            output_attentions=True,
            output_hidden_states=True,
            use_cache=cache,
        )
    assert len(out.attentions) == config.num_hidden_layers
    del out
    if device == "cuda":
        print(f"b{batch} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
