"""A training loop that keeps itself inside a memory budget: `set_per_process_memory_fraction(0.1)`
(about 14 GB of an H200), and when a step raises `torch.OutOfMemoryError` it empties the cache and
retries the batch as micro-batches of half the size with gradient accumulation; a 16-layer
causal transformer (width 1536) over batch 64 x 1024 tokens, bf16 autocast, AdamW, 3 steps;
4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5401)
B, T, D, L, V = (4, 16, 64, 2, 100) if SMALL else (64, 1024, 1536, 16, 32000)
device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    torch.cuda.set_per_process_memory_fraction(0.1)


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        layer = nn.TransformerEncoderLayer(
            D, 12 if D % 12 == 0 else 4, 4 * D, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[1], device=idx.device)
        return self.head(self.blocks(self.embed(idx), mask=mask, is_causal=True))


model = LM().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
micro = B
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    idx = torch.randint(0, V, (B, T), device=device)
    while True:
        try:
            for chunk in idx.split(micro):
                with torch.autocast(device, dtype=torch.bfloat16):
                    logits = model(chunk)
                    loss = F.cross_entropy(logits.flatten(0, 1).float(), chunk.roll(-1, 1).flatten())
                (loss * chunk.shape[0] / B).backward()
                del logits, loss
            break
        except torch.OutOfMemoryError:
            logits = loss = None
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            micro //= 2
            print(f"out of memory: micro-batch {micro}")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del idx
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
