"""Evaluation harnesses' automatic batch size (lm-evaluation-harness's `_detect_batch_size`, written out):
a Qwen2-style causal LM built from its config in bf16 (6 layers, hidden 1024, 16 heads, 4 key-value heads,
intermediate 2816, vocab 50000, SDPA attention) under `torch.cuda.set_per_process_memory_fraction(0.03)`
(4.5 GB). accelerate's `find_executable_batch_size(starting_batch_size=512)` with a
`reduce_batch_size_fn` that halves runs, at each batch, one no_grad forward of (batch, 1024) tokens and
`log_softmax` of the float logits as the scoring pass does; each out-of-memory runs `gc.collect()` and
`empty_cache()` inside the decorator's `except`. Then loglikelihood scoring of 3 batches at the batch
found (sequences of 1024, 700 and 333 tokens: the logits' float log-probabilities gathered at the
targets), then `model.generate` (greedy, 96 new tokens, the default dynamic KV cache) over prompts of 256
tokens, first at 64 times the batch found and halved after every `torch.cuda.OutOfMemoryError` (its
`empty_cache()` after the `except` block), until a batch completes.

The answer is the two batches found and the memory figures. No value-dependent sizes (generation runs its
96 tokens: no end-of-sequence token, `min_new_tokens`). 4 phases."""

import gc

import torch
import torch.nn.functional as F
from accelerate.utils import find_executable_batch_size
from transformers import Qwen2Config, Qwen2ForCausalLM

torch.manual_seed(2476)
V, MAXLEN = 50000, 1024


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


torch.cuda.set_per_process_memory_fraction(0.03)
cfg = Qwen2Config(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=6,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)
model = Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
report("load_bf16")

detect = {"batch": 512}


def halve():
    detect["batch"] //= 2
    return detect["batch"]


tried = []


@find_executable_batch_size(starting_batch_size=512, reduce_batch_size_fn=halve)
def forward_batch(batch_size):
    tried.append(batch_size)
    with torch.no_grad():
        ids = torch.randint(0, V, (batch_size, MAXLEN), device="cuda")
        F.log_softmax(model(ids).logits.float(), dim=-1)
    return batch_size


batch = forward_batch()
gc.collect()
torch.cuda.empty_cache()
print("tried", tried, "-> batch", batch)
report("detect_batch_size")

total = 0.0
with torch.no_grad():
    for length in (1024, 700, 333):
        ids = torch.randint(0, V, (batch, length), device="cuda")
        logp = F.log_softmax(model(ids).logits.float(), dim=-1)
        ll = logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1).sum(-1)
        total += ll.sum().item()
        del logp, ll
print("loglikelihood", total)
report("loglikelihood_scoring")

gen_batch = 64 * batch
while True:
    try:
        prompts = torch.randint(0, V, (gen_batch, 256), device="cuda")
        out = model.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=96,
            min_new_tokens=96,
            do_sample=False,
            pad_token_id=0,
        )
        print("generated", tuple(out.shape), "at batch", gen_batch)
        break
    except torch.cuda.OutOfMemoryError:
        print("generate out of memory at batch", gen_batch)
        gen_batch //= 2
    torch.cuda.empty_cache()
report("generate_with_halving")
