"""GPT-2 (124M, from a config) served in fp16 through CUDA graphs captured by hand, as the CUDA
graphs docs show: three warm-up passes on a side stream, `torch.cuda.graph` capture of the forward
at batch 8 x 512 into static buffers, five replays; then a second graph for batch 16 x 256 sharing
the first graph's memory pool; 3 phases."""

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4902)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
size = dict(n_embd=64, n_layer=2, n_head=2) if SMALL else {}
config = GPT2Config(**size)
config._attn_implementation = "sdpa"
model = GPT2LMHeadModel(config).to(device, dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def graphed(shape, pool=None):
    static_in = torch.randint(0, config.vocab_size, shape, device=device)
    if device != "cuda":
        with torch.no_grad():
            return None, static_in, model(static_in, use_cache=False).logits
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(static_in, use_cache=False)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool), torch.no_grad():
        static_out = model(static_in, use_cache=False).logits
    return graph, static_in, static_out


first = graphed((2, 16) if SMALL else (8, 512))
for _ in range(5):
    first[1].copy_(torch.randint(0, config.vocab_size, first[1].shape, device=device))
    if first[0] is not None:
        first[0].replay()
if device == "cuda":
    print(f"first peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
second = graphed((4, 8) if SMALL else (16, 256), pool=first[0].pool() if first[0] is not None else None)
for _ in range(5):
    if second[0] is not None:
        second[0].replay()
if device == "cuda":
    print(f"second peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
