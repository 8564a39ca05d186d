"""An RWKV-4 language model from RwkvConfig (1,024 wide, 4 layers, vocabulary 20,480, context 128)
whose WKV attention runs transformers' own fallback: a Python loop over the 128 positions that
writes each step into a zeros_like output through an indexed assignment (the custom CUDA kernel is
only loaded from the kernels hub). Trained in fp32 with AdamW (foreach) and gradient accumulation
(2 micro-batches of 8 x 128 per step, loss scaled by 1/2), 2 steps with gradient clipping; then the
model cast to bf16 and, under inference_mode, greedy generation of 32 tokens from 8 prompts of 64
through the recurrent state cache (no end-of-sequence token), and a no_grad scoring pass of
16 x 128; 4 phases."""

import os

import torch
from transformers import RwkvConfig, RwkvForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13001)
if SMALL:
    cfg = RwkvConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, context_length=32)
    MB, T, P, NEW, SB = 2, 16, 8, 4, 2
else:
    cfg = RwkvConfig(vocab_size=20480, hidden_size=1024, num_hidden_layers=4, context_length=128)
    MB, T, P, NEW, SB = 8, 128, 64, 32, 16
ACCUM = 2
device = "cuda" if torch.cuda.is_available() else "cpu"

model = RwkvForCausalLM(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)


def report(name):
    if device == "cuda":
        print(
            f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            f" allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"smoke {name}")


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(2):
    for _micro in range(ACCUM):
        ids = torch.randint(0, cfg.vocab_size, (MB, T), device=device)
        out = model(input_ids=ids, labels=ids)
        (out.loss / ACCUM).backward()
        del out
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    report(f"step {step}")

del optimizer
model = model.to(torch.bfloat16).eval()
model.generation_config.eos_token_id = None
with torch.inference_mode():
    prompts = torch.randint(0, cfg.vocab_size, (8, P), device=device)
    gen = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        use_cache=True,
    )
    print(f"generated {tuple(gen.shape)}")
report("generate")
with torch.no_grad():
    ids = torch.randint(0, cfg.vocab_size, (SB, T), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    print(f"score loss {loss.item():.3f}")
report("score")
