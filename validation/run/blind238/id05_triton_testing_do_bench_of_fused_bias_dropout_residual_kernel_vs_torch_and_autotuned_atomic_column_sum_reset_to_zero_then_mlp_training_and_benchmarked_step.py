"""Benchmarking Triton kernels of its own with triton.testing.do_bench, then training with them.

Kernels: a fused bias + dropout + residual add, out = res + dropout(y + bias), whose keep mask comes from
tl.rand(seed, offset), so the backward kernel regenerates it (dy * keep / (1 - p)) and nothing is saved;
a column sum of an (M, N) bf16 tensor into fp32 by tiles and tl.atomic_add, `@triton.autotune`d over 3
tile shapes keyed on (M, N) with reset_to_zero on its output (each benchmarked call starts from zeros),
used for the bias gradient. FusedBiasDropoutAdd is the autograd Function over them.

Phases: do_bench (quantiles 0.5 / 0.2 / 0.8) of the fused kernel and of torch's
`res + F.dropout(y + bias)` on 16384 x 4096 bf16, and the first column sum (autotuning), printing
GB/s; 3 AdamW steps of a 4-block bf16 MLP (d 2048, ffn 8192, 16384 tokens) whose blocks end in the
fused kernel; do_bench of one forward + backward of the model with grad_to_none=its parameters; a
no_grad evaluation at 32768 tokens (p = 0). 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

torch.manual_seed(2385)
device = "cuda"
D, FF, TOK, P = 2048, 8192, 16384, 0.1


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


@triton.jit
def bias_dropout_add_kernel(y_ptr, bias_ptr, res_ptr, out_ptr, n, n_cols, p, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + offs % n_cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    keep = tl.rand(seed, offs) >= p
    z = tl.where(keep, (y + b) / (1.0 - p), 0.0)
    tl.store(out_ptr + offs, r + z, mask=mask)


@triton.jit
def dropout_bwd_kernel(dy_ptr, dx_ptr, n, p, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    keep = tl.rand(seed, offs) >= p
    tl.store(dx_ptr + offs, tl.where(keep, dy / (1.0 - p), 0.0), mask=mask)


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 128}, num_warps=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4),
        triton.Config({"BLOCK_M": 256, "BLOCK_N": 128}, num_warps=8),
    ],
    key=["M", "N"],
    reset_to_zero=["out_ptr"],
)
@triton.jit
def col_sum_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None].to(tl.int64) * N + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.atomic_add(out_ptr + cols, tl.sum(x, axis=0), mask=cols < N)


def bias_dropout_add(y, bias, res, p, seed):
    out = torch.empty_like(y)
    n = y.numel()
    bias_dropout_add_kernel[(triton.cdiv(n, 1024),)](y, bias, res, out, n, y.shape[-1], p, seed, BLOCK=1024)
    return out


def col_sum(x):
    M, N = x.shape
    out = torch.zeros(N, dtype=torch.float32, device=x.device)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))
    col_sum_kernel[grid](x, out, M, N)
    return out


class FusedBiasDropoutAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, bias, res, p, seed):
        y2, res2 = y.contiguous(), res.contiguous()
        ctx.p, ctx.seed, ctx.n_cols = p, seed, y.shape[-1]
        return bias_dropout_add(y2, bias, res2, p, seed)

    @staticmethod
    def backward(ctx, dout):
        dout = dout.contiguous()
        dy = torch.empty_like(dout)
        n = dout.numel()
        dropout_bwd_kernel[(triton.cdiv(n, 1024),)](dout, dy, n, ctx.p, ctx.seed, BLOCK=1024)
        dbias = col_sum(dy.view(-1, ctx.n_cols))
        return dy, dbias.to(dout.dtype), dout, None, None


class Block(nn.Module):
    def __init__(self, seed):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, FF)
        self.fc2 = nn.Linear(FF, D, bias=False)
        self.bias2 = nn.Parameter(torch.zeros(D))
        self.seed = seed

    def forward(self, x):
        y = self.fc2(F.gelu(self.fc1(self.norm(x))))
        p = P if self.training else 0.0
        return FusedBiasDropoutAdd.apply(y, self.bias2, x, p, self.seed)


# 1. benchmarks
y = torch.randn(TOK, 4096, device=device, dtype=torch.bfloat16)
res = torch.randn_like(y)
bias = torch.randn(4096, device=device, dtype=torch.bfloat16)
gbytes = 3 * y.numel() * y.element_size() * 1e-9
ms_tri = triton.testing.do_bench(lambda: bias_dropout_add(y, bias, res, P, 1234), quantiles=[0.5, 0.2, 0.8])
ms_torch = triton.testing.do_bench(lambda: res + F.dropout(y + bias, P), quantiles=[0.5, 0.2, 0.8])
print(f"fused {gbytes / (ms_tri[0] * 1e-3):.0f} GB/s, torch {gbytes / (ms_torch[0] * 1e-3):.0f} GB/s")
s = col_sum(y)
print("col sum", tuple(s.shape), "max rel err", ((s - y.float().sum(0)).abs().max() / s.abs().max()).item())
del y, res, bias, s
report("do_bench fused kernel vs torch and autotuned column sum")

# 2. training
model = nn.Sequential(*[Block(100 + i) for i in range(4)]).to(device=device, dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(3):
    x = torch.randn(TOK, D, device=device, dtype=torch.bfloat16)
    loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
del x, loss
report("train 4 blocks with fused bias-dropout-add")

# 3. a benchmarked training step
x = torch.randn(TOK, D, device=device, dtype=torch.bfloat16)
params = list(model.parameters())
ms = triton.testing.do_bench(lambda: model(x).float().pow(2).mean().backward(), grad_to_none=params)
print(f"fwd+bwd {ms:.2f} ms")
opt.zero_grad(set_to_none=True)
del x
report("do_bench of forward + backward with grad_to_none")

# 4. evaluation
model.eval()
with torch.no_grad():
    x = torch.randn(2 * TOK, D, device=device, dtype=torch.bfloat16)
    out = model(x)
    print("eval", tuple(out.shape), out.float().abs().mean().item())
del x, out
report("no_grad eval 32768 tokens")
