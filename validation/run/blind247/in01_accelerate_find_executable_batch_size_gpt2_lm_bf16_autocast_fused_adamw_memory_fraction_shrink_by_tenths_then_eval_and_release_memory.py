"""accelerate's `find_executable_batch_size` around a whole training loop: a GPT-2 language model built
from its config (6 layers, d 768, vocab 32000, context 512; transformers' default SDPA attention) trained
with bf16 autocast and fused AdamW under `torch.cuda.set_per_process_memory_fraction(0.05)` (7.5 GB of the
H200's 150 GB). The decorator starts at batch 64 and, on every `torch.cuda.OutOfMemoryError`, runs
`gc.collect()` and `torch.cuda.empty_cache()` inside its `except` block (the failed attempt's traceback
still holding the loop's tensors), then multiplies the batch by 0.9 (accelerate 1.x:
`int(batch_size * 0.9)`), until 3 steps run. Then evaluation under no_grad at the found batch, then
`accelerate.utils.release_memory` of the optimizer and model.

The answer is the batch found and the memory figures. No value-dependent sizes. 4 phases."""

import torch
import torch.nn.functional as F
from accelerate.utils import find_executable_batch_size, release_memory
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(2471)
V, T = 32000, 512


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


torch.cuda.set_per_process_memory_fraction(0.05)
cfg = GPT2Config(vocab_size=V, n_positions=T, n_embd=768, n_layer=6, n_head=12)
model = GPT2LMHeadModel(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
report("setup")

tried = []


@find_executable_batch_size(starting_batch_size=64)
def train_loop(batch_size):
    tried.append(batch_size)
    model.train()
    for step in range(3):
        ids = torch.randint(0, V, (batch_size, T), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=ids).logits
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print("step", step, "batch", batch_size, round(loss.item(), 3))
    return batch_size


found = train_loop()
print("tried", tried)
print("found batch", found)
report("find_executable_batch_size_and_train")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    total = 0.0
    for _ in range(2):
        ids = torch.randint(0, V, (found, T), device="cuda")
        logits = model(input_ids=ids).logits
        total += F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten()).item()
        del logits
print("eval loss", round(total / 2, 3))
report("eval_no_grad")

opt, model = release_memory(opt, model)
print("released", opt, model)
report("release_memory")
