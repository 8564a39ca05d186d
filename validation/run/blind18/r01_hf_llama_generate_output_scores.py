"""HF LlamaForCausalLM from a LlamaConfig (1024 wide, 8 layers, 16 heads, 4 key-value heads, 32,000
vocabulary), bf16 weights, greedy generate() at batch 8, prompt 512, 64 new tokens (min_new_tokens equal)
with return_dict_in_generate=True and output_scores=True (every step's processed scores kept), then
with output_logits=True as well; 2 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1801)
if SMALL:
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    BATCH, PROMPT, NEW = 2, 8, 4
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=4096,
    )
    BATCH, PROMPT, NEW = 8, 512, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for name, logits in (("scores", False), ("scores+logits", True)):
    ids = torch.randint(0, config.vocab_size, (BATCH, PROMPT), device=device)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            return_dict_in_generate=True,
            output_scores=True,
            output_logits=logits,
            pad_token_id=0,
        )
    assert out.sequences.shape == (BATCH, PROMPT + NEW) and len(out.scores) == NEW
    if device == "cuda":
        print(f"{name} peak {torch.cuda.max_memory_allocated()} held {torch.cuda.memory_allocated()}")
    del out
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
