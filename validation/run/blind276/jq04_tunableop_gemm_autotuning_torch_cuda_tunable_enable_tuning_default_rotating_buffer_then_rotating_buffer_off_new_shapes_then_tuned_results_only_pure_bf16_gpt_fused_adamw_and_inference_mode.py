"""TunableOp (`torch.cuda.tunable`) in a GPT training run: with TunableOp enabled every GEMM that goes
through at::cuda::blas (Linear's addmm/mm, the lm head, their backward GEMMs; SDPA's flash kernel is not a
GEMM) is routed through `GemmTunableOp`; with tuning on, the first call of each new (op, layout, m, n, k,
dtype) signature benchmarks the candidates (on a CUDA build: the cuBLAS default, called through TunableOp)
on copies of its operands (`FindFastest`: as many copies as fill the rotating buffer, plus one; default
size: the GPU's L2 cache, queried) for up to 20 iterations / 10 ms, before the chosen one runs; later calls
look the result up. Results go to a CSV in a temporary directory (`set_filename` with the device ordinal
inserted; the tuning context writes it at exit). Model: decoder-only GPT, 12 layers, d 2048, 16 heads,
vocab 32,000, pure bf16 weights, fused AdamW (bf16 states), batch 4 x 1024 tokens. Phase 1: 3 training
steps with tuning on (every shape tuned at its first use). Phase 2: `set_rotating_buffer_size(0)` (rotation
off: one copy) and 2 steps at a new batch shape (2 x 2048: new signatures tuned). Phase 3:
`tuning_enable(False)`, 4 more steps at batch 4 x 1024 that only look up the tuned results. Phase 4:
inference_mode prefill of 8 x 512 tokens (untuned shapes fall back to the default without tuning). Fixed
sizes; seeded."""

import os
import tempfile

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2764)
dev = "cuda"
V, D, H, L = 32000, 2048, 16, 12

tmp = tempfile.mkdtemp(prefix="tunableop_")
torch.cuda.tunable.set_filename(os.path.join(tmp, "tunableop_results.csv"), insert_device_ordinal=True)
torch.cuda.tunable.set_max_tuning_iterations(20)
torch.cuda.tunable.set_max_tuning_duration(10)
torch.cuda.tunable.enable(True)
torch.cuda.tunable.tuning_enable(True)


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
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(2048, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


model = GPT().to(dev, torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
print("rotating buffer (bytes)", torch.cuda.tunable.get_rotating_buffer_size())
report("setup")


def train_step(b, t):
    idx = torch.randint(0, V, (b, t + 1), device=dev)
    logits = model(idx[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, V), idx[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


for s in range(3):
    print(f"tuning step {s} loss {train_step(4, 1024):.4f}")
print("tuned signatures", len(torch.cuda.tunable.get_results()))
report("train_tuning_default_rotating")

torch.cuda.tunable.set_rotating_buffer_size(0)
for s in range(2):
    print(f"no-rotation tuning step {s} loss {train_step(2, 2048):.4f}")
print("tuned signatures", len(torch.cuda.tunable.get_results()))
report("train_tuning_new_shapes_no_rotation")

torch.cuda.tunable.tuning_enable(False)
for s in range(4):
    print(f"tuned-only step {s} loss {train_step(4, 1024):.4f}")
print("results file", torch.cuda.tunable.get_filename())
report("train_tuned_lookup_only")

model.eval()
with torch.inference_mode():
    idx = torch.randint(0, V, (8, 512), device=dev)
    nxt = model(idx)[:, -1].argmax(-1)
print("next tokens", nxt[:4].tolist())
report("inference_prefill")
