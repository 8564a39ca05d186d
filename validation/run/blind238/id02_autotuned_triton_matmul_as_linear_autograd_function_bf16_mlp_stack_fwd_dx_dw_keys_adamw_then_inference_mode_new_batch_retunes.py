"""An MLP stack whose Linear layers run a Triton matmul of its own, autotuned, in bf16.

Kernel (after the Triton matmul tutorial): C = A @ B over any strides, tiles of BLOCK_M x BLOCK_N with a
BLOCK_K loop, grouped program ordering, fp32 accumulation, bf16 store; `@triton.autotune` over 3 configs
keyed on (M, N, K), so each new shape benchmarks every config on its first call
(`triton.testing.do_bench`). TritonLinear (an autograd Function) runs y = x @ W^T + b forward, and
dx = dy @ W and dW = dy^T @ x backward through the same kernel (transposes as strided views; db by
torch's sum).

Model: 16384 tokens x 1024 features, 4 residual blocks of LayerNorm (torch) -> TritonLinear 1024 -> 4096 ->
GELU -> TritonLinear 4096 -> 1024, then a TritonLinear 1024 -> 512 head and an MSE loss against a
random target; bf16 parameters, AdamW (foreach). Phases: the first step (every shape autotuned:
forward, dx and dW); 3 more steps (all keys cached); an inference_mode pass at 32768 tokens (new M:
the forward shapes autotuned again); a last training step at 16384 tokens after
torch.cuda.empty_cache(). 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

torch.manual_seed(2382)
device = "cuda"
D, HID, OUT, TOK = 1024, 4096, 512, 16384


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=3, num_warps=8),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=4, num_warps=4),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                  stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1))
    return c


class TritonLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        x2 = x.reshape(-1, x.shape[-1])
        y = matmul(x2, weight.t())
        y += bias
        ctx.save_for_backward(x2, weight)
        ctx.shape = x.shape
        return y.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        x2, weight = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1])
        dx = matmul(dy2, weight)
        dw = matmul(dy2.t(), x2)
        db = dy2.sum(0)
        return dx.view(ctx.shape), dw, db


class TritonLinear(nn.Module):
    def __init__(self, din, dout):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dout, din) * din ** -0.5)
        self.bias = nn.Parameter(torch.zeros(dout))

    def forward(self, x):
        return TritonLinearFn.apply(x, self.weight, self.bias)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.up = TritonLinear(D, HID)
        self.down = TritonLinear(HID, D)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[Block() for _ in range(4)])
        self.head = TritonLinear(D, OUT)

    def forward(self, x):
        return self.head(self.blocks(x))


model = Net().to(device=device, dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)


def step(tokens):
    x = torch.randn(tokens, D, device=device, dtype=torch.bfloat16)
    target = torch.randn(tokens, OUT, device=device, dtype=torch.bfloat16)
    loss = F.mse_loss(model(x).float(), target.float())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


print(f"step 0 (autotuning) loss {step(TOK):.4f}")
report("first step autotunes every shape")

for i in range(1, 4):
    print(f"step {i} loss {step(TOK):.4f}")
report("3 steps, keys cached")

with torch.inference_mode():
    x = torch.randn(2 * TOK, D, device=device, dtype=torch.bfloat16)
    y = model(x)
    print("inference", tuple(y.shape), y.float().pow(2).mean().item())
del x, y
report("inference_mode 32768 tokens retunes forward shapes")

torch.cuda.empty_cache()
print(f"step 4 loss {step(TOK):.4f}")
report("last step after empty_cache")
