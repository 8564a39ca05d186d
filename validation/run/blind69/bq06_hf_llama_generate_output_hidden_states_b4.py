"""HF LlamaForCausalLM from a LlamaConfig (1,536 wide, 12 layers, 4 KV heads) in bf16, greedy
generate() with return_dict_in_generate and output_hidden_states (every layer's hidden states of every
step kept), 4 prompts of 768 tokens, exactly 128 new tokens; 2 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6906)
if SMALL:
    config = LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    B, L, T = 2, 8, 4
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
    )
    B, L, T = 4, 768, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(1, config.vocab_size, (B, L), device=device)
out = model.generate(
    input_ids=ids,
    attention_mask=torch.ones_like(ids),
    do_sample=False,
    max_new_tokens=T,
    min_new_tokens=T,
    eos_token_id=None,
    pad_token_id=0,
    return_dict_in_generate=True,
    output_hidden_states=True,
)
print(f"generated {tuple(out.sequences.shape)} hidden {len(out.hidden_states)}")
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
