"""An xLSTM language model in the xLSTM-7B layout (transformers 5.17's `xLSTMForCausalLM`) built from config,
used for inference only (in transformers 5.17 its native chunkwise kernel's backward fails, in-place versions
or dtypes, so nobody trains it there without the `xlstm` package): 16 mLSTM blocks of d 2,048 with 4 heads (qk
head dim 256, v head dim 512), soft-capped input/forget gates, a SwiGLU feed-forward (proj factor 2.667),
RMS norms, vocabulary 50,304, output-logit soft cap. The GPU has no `xlstm` package, so transformers runs
its own torch kernels: the native chunkwise mLSTM (chunk 64: the parallel intra-chunk part and the recurrent
inter-chunk states in plain torch) for prompts and the native step kernel (float32 states) for decoding.
Pure bf16 weights. A no_grad perplexity scoring of 4 batches of 8 x 2,048; a long-document prefill of 2 x
24,576 tokens under inference_mode that takes transformers' chunked path (`max_inference_chunksize` 4,096:
the recurrent state carried from chunk to chunk, the hidden states written into a preallocated buffer);
then `generate()` (greedy, the xLSTM recurrent-state cache, min_new_tokens == max_new_tokens == 64) for 8
prompts of 1,024. No value-dependent sizes. 4 phases."""

import torch
from transformers import xLSTMConfig, xLSTMForCausalLM

torch.manual_seed(2825)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = xLSTMConfig(
    vocab_size=50304,
    hidden_size=2048,
    num_hidden_layers=16,
    num_heads=4,
    qk_dim_factor=0.5,
    v_dim_factor=1.0,
    chunk_size=64,
    gate_soft_cap=15.0,
    output_logit_soft_cap=30.0,
    ffn_proj_factor=2.667,
    max_inference_chunksize=4096,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
)
model = xLSTMForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
print("params", sum(p.numel() for p in model.parameters()))
report("xlstm_built_bf16")

with torch.no_grad():
    for _ in range(4):
        ids = torch.randint(3, cfg.vocab_size, (8, 2048), device="cuda")
        print("nll", round(model(input_ids=ids, labels=ids).loss.item(), 3))
report("no_grad_scoring")

with torch.inference_mode():
    doc = torch.randint(3, cfg.vocab_size, (2, 24576), device="cuda")
    out = model(input_ids=doc, use_cache=True, logits_to_keep=1)
    print("prefill", tuple(out.logits.shape), int(out.cache_params.seqlen_offset.item()))
del out, doc
report("chunked_long_prefill")

prompts = torch.randint(3, cfg.vocab_size, (8, 1024), device="cuda")
gen = model.generate(
    input_ids=prompts,
    attention_mask=torch.ones_like(prompts),
    max_new_tokens=64,
    min_new_tokens=64,
    do_sample=False,
    pad_token_id=1,
)
print("generated", tuple(gen.shape))
report("generate_recurrent_state")
