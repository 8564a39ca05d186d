"""A GPT-style decoder (6 layers, 768 wide, 50,304-token vocabulary, untied head) fine-tuned on a GPU
shared with other jobs: the allocator is configured before torch is imported with
`PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128,max_non_split_rounding_mb:512"` (the vocabulary logits
are oversize blocks, reused across lengths within 512 MiB of rounding), and the process caps itself
with `torch.cuda.set_per_process_memory_fraction`. A doubling batch finder (one full step per trial,
`torch.OutOfMemoryError` caught, no empty_cache) picks the batch under a 0.15 fraction; the loop
trains at varying lengths; then the cap is lowered to 0.08 mid-run (another job arrived) and the cache
handed back with `empty_cache()` (cached blocks are not counted against a new cap until freed), the
next step's OOM is caught and the loop switches to gradient accumulation over half-size micro-batches
(the `num_ooms` counter from `torch.cuda.memory_stats()` is printed); finally the cap is lifted
(fraction 1.0), `empty_cache()`, and a no_grad evaluation at full length. bf16 autocast, fp32 weights,
AdamW (foreach).

Phases: 0 model built, one warm-up step at batch 2; 1 doubling batch finder under 0.15; 2 three steps
at the found batch, lengths 512/384/448; 3 cap lowered to 0.08, empty_cache, OOM caught, accumulation
steps; 4 cap lifted, empty_cache, no_grad evaluation."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:128,max_non_split_rounding_mb:512"

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3334)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    V, D, H, L, T, START, LIMIT = 512, 64, 4, 2, 32, 2, 8
else:
    V, D, H, L, T, START, LIMIT = 50304, 768, 12, 6, 512, 4, 64


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.attn(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def set_cap(fraction):
    if device == "cuda":
        torch.cuda.set_per_process_memory_fraction(fraction)


def micro_step(batch, length, scale=1.0):
    idx = torch.randint(0, V, (batch, length + 1), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(idx[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, V), idx[:, 1:].reshape(-1)) * scale
    loss.backward()
    return loss.item()


def step(batch, length, accum=1):
    total = 0.0
    for _ in range(accum):
        total += micro_step(batch // accum, length, 1.0 / accum)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return total


model = GPT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
step(2, T)
report("phase0 built and warmed")

set_cap(0.15)
batch, found = START, 2
while batch <= LIMIT:
    try:
        step(batch, T)
        found = batch
        print("fits", batch)
    except torch.OutOfMemoryError:
        print("oom", batch)
        opt.zero_grad(set_to_none=True)
        break
    batch *= 2
report("phase1 batch finder")

for length in (T, T * 3 // 4, T * 7 // 8):
    print("train", found, length, round(step(found, length), 4))
report("phase2 training")

set_cap(0.08)
if device == "cuda":
    torch.cuda.empty_cache()
accum = 1
for length in (T, T * 3 // 4, T):
    while True:
        try:
            print("train", found, accum, length, round(step(found, length, accum), 4))
            break
        except torch.OutOfMemoryError:
            opt.zero_grad(set_to_none=True)
            if accum >= found:
                raise
            accum *= 2
            print("oom, accumulating over", accum)
if device == "cuda":
    print("num_ooms", torch.cuda.memory_stats()["num_ooms"])
report("phase3 lowered cap")

set_cap(1.0)
if device == "cuda":
    torch.cuda.empty_cache()
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    for n in range(2):
        idx = torch.randint(0, V, (found, T), device=device)
        print("eval", n, model(idx)[:, -1].argmax(-1).shape)
report("phase4 eval")
