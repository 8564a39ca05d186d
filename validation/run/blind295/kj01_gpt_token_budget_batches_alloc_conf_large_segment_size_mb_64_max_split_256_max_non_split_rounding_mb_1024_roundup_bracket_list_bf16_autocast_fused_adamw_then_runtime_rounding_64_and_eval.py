"""A GPT language model trained on token-budget batches under allocator settings a user tuning fragmentation
would write before the first CUDA call: `os.environ["PYTORCH_CUDA_ALLOC_CONF"] =
"large_segment_size_mb:64,max_split_size_mb:256,max_non_split_rounding_mb:1024,roundup_power2_divisions:[64:2,256:4,>:8]"`
(small allocations get 64 MB segments, blocks of 256 MB and more are never split, an oversize free block may be
reused for a request up to 1 GB smaller, rounding divisions per size bracket).

The model is written by hand: 8 pre-LN blocks (d 1,024, 16 heads, SDPA causal, GELU MLP 4x), an untied
50,304-way head, bf16 autocast over fp32 weights, `AdamW(fused=True)`, clipping at 1.0. Each batch holds about
8,192 tokens: its length is drawn on the host (seeded `random.Random`) from 256..2,048 in steps of 128 and the
batch size is 8,192 // length, so the bf16 logits (0.4-0.8 GB) and their fp32 cross-entropy buffers are oversize
blocks of changing sizes.

Phases: set-up (weights, optimizer state made by one step at length 512); 24 training steps; evaluation under
no_grad over 8 batches of 12,288 tokens; `torch.cuda.memory._set_allocator_settings("max_non_split_rounding_mb:64")`
mid-run (max_split_size_mb goes back to its default since it is not named) then 16 more training steps. 4 phases.
No value-dependent sizes: every shape comes from the host RNG."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = (
    "large_segment_size_mb:64,max_split_size_mb:256,max_non_split_rounding_mb:1024,"
    "roundup_power2_divisions:[64:2,256:4,>:8]"
)

import random  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(2951)
rng = random.Random(29510)
V, D, H, L = 50304, 1024, 16, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(2048, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)


def batch(tokens):
    t = rng.randrange(256, 2049, 128)
    b = max(1, tokens // t)
    idx = torch.randint(0, V, (b, t + 1))
    return idx[:, :-1].cuda(non_blocking=False), idx[:, 1:].cuda()


def step(x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, V), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


x0 = torch.randint(0, V, (8, 512), device="cuda")
step(x0, torch.roll(x0, -1, 1))
del x0
report("setup")

losses = [step(*batch(8192)) for _ in range(24)]
print(f"train loss {sum(losses) / len(losses):.3f}")
report("train_24_steps_large_segment_64_max_split_256_non_split_rounding_1024")

model.eval()
total = 0.0
with torch.no_grad():
    for _ in range(8):
        x, y = batch(12288)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        total += F.cross_entropy(logits.float().view(-1, V), y.reshape(-1)).item()
        del x, y, logits
print(f"eval loss {total / 8:.3f}")
report("eval_no_grad_8_batches_12288_tokens")

model.train()
torch.cuda.memory._set_allocator_settings("max_non_split_rounding_mb:64")
losses = [step(*batch(8192)) for _ in range(16)]
print(f"train loss {sum(losses) / len(losses):.3f}")
report("train_16_steps_after_runtime_max_non_split_rounding_64")
