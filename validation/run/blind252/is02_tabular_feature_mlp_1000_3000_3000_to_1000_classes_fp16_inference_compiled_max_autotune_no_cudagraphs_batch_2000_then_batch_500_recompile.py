"""Serving a tabular classifier: an MLP over 1,000 input features (1000 -> 3000 -> 3000 -> 1000 classes, GELU,
LayerNorm after each hidden layer, dropout off in eval) with fp16 weights, compiled with
`torch.compile(model, mode="max-autotune-no-cudagraphs")` and run under `inference_mode`: a first batch of
2,000 rows (compile, with Inductor's GEMM autotuning), four more batches of the same size, then batches of
500 rows (a recompile), the softmax probabilities and the top-5 classes copied to the host each time.

Hidden sizes 1000 and 3000 and both batch sizes are multiples of 4 (the recompile is dynamic in the batch:
dynamo's automatic dynamic shapes). No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn

torch.manual_seed(2522)
F_IN, H1, H2, C = 1000, 3000, 3000, 1000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = nn.Sequential(
    nn.Linear(F_IN, H1), nn.GELU(), nn.LayerNorm(H1), nn.Dropout(0.1),
    nn.Linear(H1, H2), nn.GELU(), nn.LayerNorm(H2), nn.Dropout(0.1),
    nn.Linear(H2, C),
).cuda().half().eval()
cmodel = torch.compile(model, mode="max-autotune-no-cudagraphs")
features = torch.randn(8000, F_IN, device="cuda", dtype=torch.half)
report("setup")


def serve(x):
    with torch.inference_mode():
        probs = cmodel(x).float().softmax(dim=-1)
        top = probs.topk(5, dim=-1)
        return top.values.cpu(), top.indices.cpu()


serve(features[:2000])
report("first_batch_compile")

for i in range(1, 4):
    serve(features[i * 2000 : (i + 1) * 2000])
report("batches_2000")

for i in range(4):
    serve(features[i * 500 : (i + 1) * 500])
report("batches_500_recompile")
