"""HF model.generate() on a small LlamaForCausalLM from LlamaConfig (random init, bf16): greedy,
max_new_tokens == min_new_tokens so the length is fixed."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

HID, INTER, LAYERS, HEADS, KV, VOCAB, B, PROMPT, NEW = (
    (64, 128, 2, 4, 2, 256, 2, 8, 4) if os.environ.get("SMOKE") else (1024, 2816, 8, 16, 4, 32000, 4, 128, 64)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

config = LlamaConfig(
    vocab_size=VOCAB,
    hidden_size=HID,
    intermediate_size=INTER,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    max_position_embeddings=2048,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
input_ids = torch.randint(3, VOCAB, (B, PROMPT), device=device)
attention_mask = torch.ones_like(input_ids)
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

out = model.generate(
    input_ids=input_ids,
    attention_mask=attention_mask,
    max_new_tokens=NEW,
    min_new_tokens=NEW,
    do_sample=False,
)
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
print(out.shape)
