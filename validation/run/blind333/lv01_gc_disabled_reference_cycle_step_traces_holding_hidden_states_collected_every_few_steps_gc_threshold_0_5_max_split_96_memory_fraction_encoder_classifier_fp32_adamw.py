"""A sequence classifier (hand-written pre-LN transformer encoder, 6 layers 768 wide, SDPA, fp32,
AdamW) trained by a loop that turns Python's cyclic garbage collector off (`gc.disable()`, as
latency-sensitive trainers do) and keeps a per-step trace object for its logging callbacks: each
`StepTrace` holds the step's detached logits and every layer's hidden states, and a callback closure
that refers back to the trace, a reference cycle, so a trace's CUDA tensors outlive the step until the
loop calls `gc.collect()` itself. The allocator is configured before torch is imported with
`PYTORCH_CUDA_ALLOC_CONF="garbage_collection_threshold:0.5,max_split_size_mb:96"` and the process is
capped with `torch.cuda.set_per_process_memory_fraction(0.1)` (the threshold only acts under a
fraction); sequence lengths vary from step to step.

Phases: 0 model and optimizer built; 1 four steps, no collection (traces pile up); 2 `gc.collect()`,
then six steps collecting every second step; 3 a no_grad evaluation whose traces are kept in a list,
then dropped and collected; 4 `gc.collect()`, `empty_cache()`, two more steps."""

import gc
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "garbage_collection_threshold:0.5,max_split_size_mb:96"

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3331)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    V, D, H, L, B, C = 512, 64, 4, 2, 4, 10
    LENGTHS = [16, 24, 8, 32, 16, 12, 24, 20, 28, 8, 16, 24]
else:
    V, D, H, L, B, C = 32000, 768, 12, 6, 32, 1000
    LENGTHS = [256, 384, 192, 320, 448, 128, 256, 512, 224, 384, 288, 160]
gc.disable()
if device == "cuda":
    torch.cuda.set_per_process_memory_fraction(0.1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(1, 512, D))
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, C)

    def forward(self, ids):
        x = self.emb(ids) + self.pos[:, : ids.shape[1]]
        hidden = []
        for blk in self.blocks:
            x = blk(x)
            hidden.append(x)
        return self.head(self.norm(x).mean(1)), hidden


class StepTrace:
    """What the logging callbacks see; `on_log` closes over the trace itself: a cycle."""

    def __init__(self, step, logits, hidden):
        self.step = step
        self.logits = logits.detach()
        self.hidden = [h.detach() for h in hidden]
        self.on_log = lambda: (self.step, self.logits.shape, len(self.hidden))


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def train_step(step, length):
    ids = torch.randint(0, V, (B, length), device=device)
    labels = torch.randint(0, C, (B,), device=device)
    logits, hidden = model(ids)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    trace = StepTrace(step, logits, hidden)
    print("step", step, length, trace.on_log()[0], round(loss.item(), 4))


model = Classifier().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
report("phase0 built")

for i in range(4):
    train_step(i, LENGTHS[i])
report("phase1 no collection")

print("collected", gc.collect() > 0)
for i in range(4, 10):
    train_step(i, LENGTHS[i])
    if i % 2 == 1:
        gc.collect()
report("phase2 collect every second step")

model.eval()
kept = []
with torch.no_grad():
    for j, length in enumerate([512, 256, 384]):
        ids = torch.randint(0, V, (B, length), device=device)
        logits, hidden = model(ids)
        kept.append(StepTrace(100 + j, logits, hidden[-2:]))
        del logits, hidden
print("eval traces", [t.on_log()[2] for t in kept])
del kept
gc.collect()
model.train()
report("phase3 eval traces")

gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()
for i in range(10, 12):
    train_step(i, LENGTHS[i])
report("phase4 after empty_cache")
