"""Cut one attention's forward and backward out of the H100 traces of the HF
workloads (`fixtures/estimate/traces.tar.xz`, recorded by validation/hf_cases.py),
for tests/sdpa_traces.rs. Only `alloc` and `free_requested` events are kept
(segment actions depend on the rest of the run).

    python3 extract_sdpa_slices.py ../../../../fixtures/estimate/traces.tar.xz sdpa_slices

The index ranges (inclusive, into the trace list) were found by reading the
traces: the forward slice runs from the first allocation of
`F.scaled_dot_product_attention` to its last free; the backward slice from
the node's first allocation (the incoming gradient already exists) to the
last `release_variables` free of its saved tensors, which the traces show in
the generated order: inputs alphabetically (attn_bias, key, query, value),
then outputs (logsumexp, output, philox_offset, philox_seed).
"""
import json
import os
import sys
import tarfile

SLICES = {
    # cuDNN, causal, q (B,H,S,D) a view of (B,S,H*D), k/v contiguous (DynamicCache cat); layer 1
    "llama_train_bf16_adamw": ((232, 237), (1134, 1154)),
    # cuDNN with enable_gqa (12 query heads, 4 key/value heads); layer 2
    "llama_gqa_train_bf16": ((322, 327), (570, 590)),
    # cuDNN with a boolean sliding-window mask (S,S) expanded to (B,1,S,S); repeat_kv'd k/v; layer 3
    "mistral_train_bf16_sw": ((493, 505), (773, 795)),
    # memory-efficient, causal, k/v contiguous; layer 3
    "llama_train_fp32_adamw": ((382, 383), (592, 617)),
    # memory-efficient, dropout 0.1, not causal, q/k/v views of three projections; layer 3
    "bert_train_fp32": ((224, 225), (392, 417)),
    # math: fp32 causal with enable_gqa (8 query, 2 key/value heads); layer 3
    "mistral_train_fp32": ((500, 538), (775, 810)),
    # cuDNN with dropout 0.1 (not a multiple of 1/16: 2.11 still takes cuDNN), not causal; layer 3
    "bert_train_bf16_sgdm": ((227, 232), (399, 419)),
    # memory-efficient at S=197 (workspace rounding), q/k/v views of three projections; layer 3
    "vit_train_fp32": ((174, 175), (288, 313)),
    # inference (no_grad): cuDNN without logsumexp, the philox tensors freed at once; layer 0
    "llama_infer_bf16": ((147, 155), (0, -1)),
    # inference: memory-efficient, a 0-element logsumexp (no memory); layer 0
    "llama_infer_fp32": ((136, 136), (0, -1)),
    # inference: math with enable_gqa and head dim 128; layer 0
    "qwen3_infer_fp32": ((176, 222), (0, -1)),
}

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
with tarfile.open(src) as tar:
    for name, ((f0, f1), (b0, b1)) in SLICES.items():
        trace = json.load(tar.extractfile(f"{name}.trace.json"))
        with open(os.path.join(out, f"{name}.txt"), "w") as o:
            for label, (lo, hi) in (("fwd", (f0, f1)), ("bwd", (b0, b1))):
                o.write(f"# {label}\n")
                for e in trace[lo : hi + 1]:
                    if e[0] in ("alloc", "free_requested"):
                        o.write(f"{e[0]} {e[2]}\n")
