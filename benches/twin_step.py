"""The twin's own work on the 8B Llama step, without the imports: an N-layer Llama-3.1-8B-wide
LlamaForCausalLM (default 8 layers) built in bf16, one checkpointed forward, backward and AdamW
step, repeated in one capture; prints the minimum and median CPU seconds of an iteration (the
first left out) for the build, forward, backward, step and their sum. Run it on one core, with
another package first on PYTHONPATH to compare:

    taskset -c 0 python benches/twin_step.py [LAYERS] [ITERATIONS]
"""

import gc
import statistics
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from vramscope._capture import Capture

layers = int(sys.argv[1]) if len(sys.argv) > 1 else 8
iterations = int(sys.argv[2]) if len(sys.argv) > 2 else 10
config = LlamaConfig(
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=layers,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=131072,
    rope_theta=500000.0,
)
torch.set_default_dtype(torch.bfloat16)
times = []
with Capture(gpu="h100") as cap:
    gc.freeze()  # the imports' objects, as `vramscope run` freezes them
    for _ in range(iterations):
        t0 = time.process_time()
        with torch.device("cuda"):
            model = LlamaForCausalLM(config)
        model.gradient_checkpointing_enable()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        ids = torch.randint(0, config.vocab_size, (1, 2048), device="cuda")
        t1 = time.process_time()
        loss = model(input_ids=ids, labels=ids).loss
        t2 = time.process_time()
        loss.backward()
        t3 = time.process_time()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t4 = time.process_time()
        del model, opt, ids, loss
        gc.collect()
        times.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0))
    peak = torch.cuda.max_memory_allocated()
cols = list(zip(*times[1:], strict=True))
print("         build   forward backward step    sum")
print("min    " + " ".join(f"{min(c):.4f}" for c in cols))
print("median " + " ".join(f"{statistics.median(c):.4f}" for c in cols))
print(f"peak allocated {peak}, ops {cap.ops}")
