"""Chunked prefill of a Llama (1.3B-sized, from a config) in bf16 under `inference_mode`, with
`sdpa_kernel(SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION)`: an 8,192-token prompt at
batch 2 fed in chunks of 2,048 into a `DynamicCache`, then 32 greedy decode steps by hand; 3
phases."""

import os

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4906)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
if SMALL:
    size = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    B, PROMPT, CHUNK, NEW = 1, 64, 16, 4
else:
    size = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32)
    B, PROMPT, CHUNK, NEW = 2, 8192, 2048, 32
config = LlamaConfig(vocab_size=32000, num_key_value_heads=4, max_position_embeddings=PROMPT + NEW, **size)
config._attn_implementation = "sdpa"
model = LlamaForCausalLM(config).to(device, dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
backends = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION] if device == "cuda" else [SDPBackend.MATH]
with torch.inference_mode(), sdpa_kernel(backends):
    ids = torch.randint(0, 32000, (B, PROMPT), device=device)
    cache = DynamicCache(config=config)
    for start in range(0, PROMPT, CHUNK):
        chunk = ids[:, start : start + CHUNK]
        out = model(input_ids=chunk, past_key_values=cache, use_cache=True, logits_to_keep=1)
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    del out
    if device == "cuda":
        print(f"prefill peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    for _ in range(NEW):
        out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        del out
    if device == "cuda":
        print(f"decode peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
