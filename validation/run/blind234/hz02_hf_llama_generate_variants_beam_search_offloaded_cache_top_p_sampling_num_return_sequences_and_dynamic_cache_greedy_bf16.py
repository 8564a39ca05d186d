"""`generate()` variants on a Llama from config in bf16 (8 layers, d 1024, 16 heads, 4 KV heads, MLP
2816, vocab 32000; no download), each its own phase: greedy with the default dynamic cache for 8 prompts
of 512 and 128 new tokens; beam search with 4 beams for 4 prompts of 256 and 64 new tokens; top-p
sampling (0.9) with 3 return sequences for 4 prompts of 256 and 96 new tokens; greedy with
`cache_implementation="offloaded"` (the KV cache kept on the host between layers) for 8 prompts of 512
and 64 new tokens. Every run to `min_new_tokens = max_new_tokens` (no early stop), attention masks all
ones, pad = eos = 0 unused. No value-dependent sizes. 4 phases."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(2342)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = LlamaConfig(
    vocab_size=32000,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=4096,
    pad_token_id=0,
    eos_token_id=0,
    bos_token_id=1,
)
model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()


def run(tag, batch, prompt, new, **kw):
    x = torch.randint(2, 32000, (batch, prompt), device="cuda")
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new, min_new_tokens=new, **kw)
    print(tag, tuple(out.shape))
    del out, x
    report(tag)


run("greedy dynamic cache", 8, 512, 128, do_sample=False)
run("beam search 4", 4, 256, 64, num_beams=4, do_sample=False, early_stopping=False)
run("top-p sampling x3", 4, 256, 96, do_sample=True, top_p=0.9, num_return_sequences=3)
run("offloaded cache greedy", 8, 512, 64, do_sample=False, cache_implementation="offloaded")
