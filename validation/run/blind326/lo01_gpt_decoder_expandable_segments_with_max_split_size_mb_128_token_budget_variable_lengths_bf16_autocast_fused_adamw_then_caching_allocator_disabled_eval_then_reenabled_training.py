"""A hand-written GPT decoder (pre-LN blocks, SDPA is_causal, GELU MLP, tied lm_head) trained with
token-budget batches of variable sequence length (8,192 tokens a batch, lengths from a fixed list) under
`PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True,max_split_size_mb:128"` set in `os.environ` before
torch is imported, fp32 weights, bf16 autocast, `AdamW(fused=True)` with decay groups. Then, as one
does to check that an evaluation leaks nothing, the caching allocator is switched off with
`torch.cuda.caching_allocator_enable(False)` (every tensor gets its own device allocation, freed as
soon as the tensor dies) for a no_grad evaluation over three lengths, switched back on
(`caching_allocator_enable(True)`), and training resumes for three more steps.

Phases: 0 model and optimizer built; 1 six training steps over varying lengths; 2 caching allocator
disabled, no_grad evaluation; 3 allocator re-enabled, three more steps."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,max_split_size_mb:128"

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3261)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    V, D, H, L, TOKENS = 512, 64, 4, 2, 512
    LENGTHS = [64, 32, 128]
else:
    V, D, H, L, TOKENS = 32000, 1024, 16, 8, 8192
    LENGTHS = [512, 384, 1024, 256, 768, 640]


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
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(max(LENGTHS), D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def batch(length):
    tokens = torch.randint(0, V, (TOKENS // length, length + 1), device=device)
    return tokens[:, :-1], tokens[:, 1:]


def train_step(length):
    x, y = batch(length)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, V), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model = GPT().to(device)
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-4,
    betas=(0.9, 0.95),
    fused=device == "cuda",
)
report("phase0 setup")

for length in LENGTHS:
    print("train", length, train_step(length))
report("phase1 train")

if device == "cuda":
    torch.cuda.caching_allocator_enable(False)
model.eval()
with torch.no_grad():
    for length in LENGTHS[:3]:
        x, y = batch(length)
        with torch.autocast(device, dtype=torch.bfloat16):
            logits = model(x)
        print("eval", length, F.cross_entropy(logits.float().view(-1, V), y.reshape(-1)).item())
        del logits, x, y
report("phase2 uncached eval")

if device == "cuda":
    torch.cuda.caching_allocator_enable(True)
model.train()
for length in LENGTHS[3:]:
    print("train", length, train_step(length))
report("phase3 train again")
