"""A GPT pre-training loop that trades host memory for device memory on purpose: the activations autograd
saves are offloaded by `torch.autograd.graph.save_on_cpu(pin_memory=True)`, the token batches come from pinned
host tensors copied by a side-stream prefetcher (`non_blocking=True` on `copy_stream`, the consumer's
`wait_stream`, then `record_stream(torch.cuda.current_stream())` on each batch so the caching allocator does
not hand its block back to the copy stream early), `torch.cuda.empty_cache()` runs between phases, and the
allocator is switched to expandable segments mid-run by `torch.cuda.memory._set_allocator_settings` for a
longer-context phase, then back.

Model: 12 pre-LN blocks at 1,024 (16 heads, GELU MLP 4,096, SDPA is_causal), a 32,768-token vocabulary with a
tied head, fp32 weights under bf16 autocast, AdamW(fused=True).

Phases: 0 weights, optimizer, pinned host token batches; 1 two steps at 8 x 1,024 without offloading (the
prefetcher running); 2 `empty_cache()`, then two steps at 8 x 1,024 under `save_on_cpu(pin_memory=True)`; 3
`_set_allocator_settings("expandable_segments:True")`, `empty_cache()`, two offloaded steps at 4 x 2,048; 4
`_set_allocator_settings("expandable_segments:False")`, `empty_cache()`, an evaluation of 16 x 1,024 under
no_grad in 4 chunks, with `memory_stats()` keys printed. 5 phases. Seeded."""

import os

import torch
import torch.nn.functional as F
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3434)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    V, D, L, HEADS, B, T = 512, 64, 2, 2, 2, 32
else:
    V, D, L, HEADS, B, T = 32768, 1024, 12, 16, 8, 1024
cuda = device == "cuda"


def report(tag):
    if cuda:
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, max_t):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(max_t, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


class Prefetcher:
    """Copies the next pinned host batch to the device on a side stream while the current step runs."""

    def __init__(self, host_batches):
        self.host = host_batches
        self.stream = torch.cuda.Stream() if cuda else None
        self.i = 0
        self.next = None
        self.preload()

    def preload(self):
        src = self.host[self.i % len(self.host)]
        self.i += 1
        if self.stream is None:
            self.next = src.clone()
            return
        with torch.cuda.stream(self.stream):
            self.next = src.to(device, non_blocking=True)

    def get(self):
        if self.stream is not None:
            torch.cuda.current_stream().wait_stream(self.stream)
            self.next.record_stream(torch.cuda.current_stream())
        batch = self.next
        self.preload()
        return batch[:, :-1], batch[:, 1:]


def host_batches(b, t, n=3):
    out = []
    for _ in range(n):
        x = torch.randint(0, V, (b, t + 1))
        out.append(x.pin_memory() if cuda else x)
    return out


def train(loader, steps, offload):
    for _ in range(steps):
        idx, tgt = loader.get()
        with torch.autocast(device, dtype=torch.bfloat16):
            if offload:
                with torch.autograd.graph.save_on_cpu(pin_memory=True):
                    loss = model(idx, tgt)
            else:
                loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss.item()


model = GPT(2 * T).to(device)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-4,
    betas=(0.9, 0.95),
    fused=cuda,
)
loader = Prefetcher(host_batches(B, T))
report("weights, fused AdamW, pinned token batches")

print(f"plain: loss {train(loader, 2, offload=False):.4f}")
report("two steps without offloading")

if cuda:
    torch.cuda.empty_cache()
print(f"offloaded: loss {train(loader, 2, offload=True):.4f}")
report("empty_cache, two steps under save_on_cpu(pin_memory=True)")

if cuda:
    torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    torch.cuda.empty_cache()
long_loader = Prefetcher(host_batches(B // 2, 2 * T))
print(f"long context: loss {train(long_loader, 2, offload=True):.4f}")
del long_loader
report("expandable segments on, two offloaded steps at twice the context")

if cuda:
    torch.cuda.memory._set_allocator_settings("expandable_segments:False")
    torch.cuda.empty_cache()
model.eval()
eval_tokens = torch.randint(0, V, (2 * B, T + 1), device=device)
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    losses = [model(c[:, :-1], c[:, 1:]) for c in eval_tokens.chunk(4)]
print(f"eval loss {torch.stack(losses).mean().item():.4f}")
if cuda:
    stats = torch.cuda.memory_stats()
    print(
        {
            k: stats[k]
            for k in (
                "segment.all.current",
                "reserved_bytes.all.peak",
                "num_device_alloc",
                "num_sync_all_streams",
            )
        }
    )
report("expandable segments off, empty_cache, chunked evaluation")
