"""An out-of-memory-resilient training loop in the style of fairseq's trainer, with
`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` set before torch is imported and
`torch.cuda.set_per_process_memory_fraction(0.06)` (9.0 GB): a 6-layer pre-norm GPT (d 1024, 16 heads
through SDPA, MLP 4096, vocab 50257, untied head) in fp32 with bf16 autocast and foreach AdamW is fed a
stream of (batch, length) shapes whose token count grows; a step that raises
`torch.cuda.OutOfMemoryError` (forward or backward: the loop records which) is skipped as fairseq does:
a warning, every `p.grad = None`, `torch.cuda.empty_cache()` inside the `except` block; the same batch is
then retried as two micro-batches with gradient accumulation. Then a validation pass that keeps its
last error for a later log (`last_error = e`, whose traceback holds the failed forward's frames and
tensors): the figures with the error held, then after `del last_error`, then after `empty_cache()`.

The answer is which shapes ran out of memory and where, and the memory figures. No value-dependent sizes.
6 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2475)
V, D, H, L = 50257, 1024, 16, 6


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        x = x + self.o(
            F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D)
        )
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Embedding(2048, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.emb(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


torch.cuda.set_per_process_memory_fraction(0.06)
model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
report("setup")

stage = None


def loss_of(b, t):
    global stage
    idx = torch.randint(0, V, (b, t), device="cuda")
    stage = "forward"
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), idx.flatten())
    return loss


def train_step(b, t, micro=1):
    global stage
    for _ in range(micro):
        loss = loss_of(b // micro, t)
        stage = "backward"
        (loss / micro).backward()
    stage = "step"
    opt.step()
    opt.zero_grad(set_to_none=True)


shapes = [(8, 256), (8, 512), (16, 512), (8, 1024), (16, 1024), (12, 1024), (4, 2048)]
skipped = []
for b, t in shapes:
    try:
        train_step(b, t)
        print(f"batch {b} x {t}: ok")
    except torch.cuda.OutOfMemoryError:
        print(f"| WARNING: ran out of memory in {stage} at batch {b} x {t}, skipping batch")
        for p in model.parameters():
            p.grad = None
        torch.cuda.empty_cache()
        skipped.append((b, t))
report("train_with_oom_skips")

for b, t in skipped:
    try:
        train_step(b, t, micro=2)
        print(f"batch {b} x {t} as 2 micro-batches: ok")
    except torch.cuda.OutOfMemoryError:
        print(f"batch {b} x {t} as 2 micro-batches: out of memory in {stage}")
        for p in model.parameters():
            p.grad = None
        torch.cuda.empty_cache()
report("retry_as_micro_batches")

model.eval()
last_error = None
with torch.no_grad():
    for b, t in [(4, 1024), (16, 1024), (2, 2048)]:
        try:
            loss = loss_of(b, t)
            print(f"valid {b} x {t}: ok")
            del loss
        except torch.cuda.OutOfMemoryError as e:
            print(f"valid {b} x {t}: out of memory in {stage}")
            last_error = e
report("validation_error_kept")

print("last error kept:", type(last_error).__name__)
del last_error
report("error_deleted")

torch.cuda.empty_cache()
report("cache_emptied")
