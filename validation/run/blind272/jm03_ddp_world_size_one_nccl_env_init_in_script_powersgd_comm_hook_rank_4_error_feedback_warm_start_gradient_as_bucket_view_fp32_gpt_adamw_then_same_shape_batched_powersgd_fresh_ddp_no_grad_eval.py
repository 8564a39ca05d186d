"""DDP with PowerSGD gradient compression (Vogels et al. 2019) at world size 1, as a one-GPU user runs a
multi-GPU recipe: the script sets MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE itself and calls
`init_process_group("nccl", init_method="env://")` (no torchrun; one process). A GPT decoder (8 x 1,024,
16 heads, vocabulary 32,000, untied head) in fp32/TF32 wrapped in `DistributedDataParallel(bucket_cap_mb=64,
gradient_as_bucket_view=True)` with `powerSGD_hook` registered (`PowerSGDState(matrix_approximation_rank=4,
start_powerSGD_iter=3, use_error_feedback=True, warm_start=True, min_compression_rate=2)`): the first two
steps all-reduce the buckets as they are (the hook's vanilla phase), from the third on every 2-D gradient
of each bucket is compressed to P (n x 4) and Q (m x 4) with the error-feedback copy of the bucket and the
warm-started Q kept per bucket across steps, 1-D gradients all-reduced uncompressed. AdamW (foreach), 6
steps at 8 x 1,024. Then a second model of the same shape wrapped in a fresh DDP with `powerSGD_hook` at
rank 8 with `batch_tensors_with_same_shape=True` (the gradients of one shape in a bucket stacked,
`torch.stack`, and compressed as one batch: batched `bmm` and QR), error feedback, no warm start (P and Q
allocated every step), 4 steps, and a no_grad evaluation. (`batched_powerSGD_hook`, the whole bucket as one
square matrix, is not used: in 2.11 it hands a 2-D matrix to `_orthogonalize`, which asserts 3-D.)
Synthetic tokens, seeded. Fixed sizes. 4 phases."""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29517")
os.environ.setdefault("RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("LOCAL_RANK", "0")

torch.manual_seed(2723)
torch.backends.cuda.matmul.allow_tf32 = True
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
dist.init_process_group("nccl", init_method="env://", device_id=dev)

V, D, H, L, T, B = 32000, 1024, 16, 8, 1024, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def batch(gen):
    data = torch.randint(0, V, (B, T + 1), generator=gen).to(dev, non_blocking=True)
    return data[:, :-1], data[:, 1:]


def train(ddp, opt, steps, gen):
    for _ in range(steps):
        x, y = batch(gen)
        logits = ddp(x)
        loss = F.cross_entropy(logits.view(-1, V), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss.item()


gen = torch.Generator().manual_seed(7)
model = GPT().to(dev)
ddp = DDP(model, device_ids=[0], bucket_cap_mb=64, gradient_as_bucket_view=True)
state = powersgd.PowerSGDState(
    process_group=None,
    matrix_approximation_rank=4,
    start_powerSGD_iter=3,
    min_compression_rate=2,
    use_error_feedback=True,
    warm_start=True,
    random_seed=0,
)
ddp.register_comm_hook(state, powersgd.powerSGD_hook)
opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
report("setup")

print("powerSGD loss", train(ddp, opt, 6, gen))
print("error dict buckets", len(state.error_dict), "q memory dict", len(state.q_memory_dict))
report("powersgd")

del ddp, opt, state, model
model = GPT().to(dev)
ddp = DDP(model, device_ids=[0], bucket_cap_mb=64, gradient_as_bucket_view=True)
state = powersgd.PowerSGDState(
    process_group=None,
    matrix_approximation_rank=8,
    start_powerSGD_iter=2,
    use_error_feedback=True,
    warm_start=False,
    batch_tensors_with_same_shape=True,
)
ddp.register_comm_hook(state, powersgd.powerSGD_hook)
opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
print("same-shape batched powerSGD loss", train(ddp, opt, 4, gen))
report("batched")

ddp.eval()
with torch.no_grad():
    tot = 0.0
    for _ in range(3):
        x, y = batch(gen)
        tot += F.cross_entropy(ddp(x).view(-1, V), y.reshape(-1)).item()
print("eval loss", tot / 3)
report("eval")
dist.destroy_process_group()
