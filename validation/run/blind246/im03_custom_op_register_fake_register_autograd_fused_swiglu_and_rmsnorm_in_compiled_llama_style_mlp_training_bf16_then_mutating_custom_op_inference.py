"""`torch.library.custom_op` inside a compiled model: a Llama-style stack (d 1024, 6 blocks of RMSNorm +
SwiGLU MLP with hidden 2816, no attention) whose SwiGLU activation and RMSNorm are custom operators
(`im::swiglu`, `im::rmsnorm`) with fake implementations (`register_fake`) and backward formulas
(`register_autograd`, saving their inputs). bf16 weights, AdamW (foreach), batch 16 x 512 tokens,
compiled training for three steps; then the same model eager (the custom ops run their eager
implementations) for one step; then compiled inference under no_grad at batch 32 x 512 with a
mutating custom operator (`im::scale_`, `mutates_args=("x",)`) applied to the output in place.

No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2463)
D, F_HID, L = 1024, 2816, 6


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


@torch.library.custom_op("im::swiglu", mutates_args=())
def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


@swiglu.register_fake
def _(gate, up):
    return torch.empty_like(gate)


def _swiglu_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _swiglu_backward(ctx, grad):
    gate, up = ctx.saved_tensors
    sig = torch.sigmoid(gate)
    return grad * up * sig * (1 + gate * (1 - sig)), grad * gate * sig


swiglu.register_autograd(_swiglu_backward, setup_context=_swiglu_setup)


@torch.library.custom_op("im::rmsnorm", mutates_args=())
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


@rmsnorm.register_fake
def _(x, weight, eps):
    return torch.empty_like(x)


def _rms_setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _rms_backward(ctx, grad):
    x, weight = ctx.saved_tensors
    xf, gf = x.float(), grad.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps)
    n = xf * r
    gw = (gf * n).sum(dim=tuple(range(x.dim() - 1))).to(weight.dtype)
    gn = gf * weight.float()
    gx = r * (gn - n * (gn * n).mean(-1, keepdim=True))
    return gx.to(x.dtype), gw, None


rmsnorm.register_autograd(_rms_backward, setup_context=_rms_setup)


@torch.library.custom_op("im::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, s: float) -> None:
    x.mul_(s)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(D))
        self.gate = nn.Linear(D, F_HID, bias=False)
        self.up = nn.Linear(D, F_HID, bias=False)
        self.down = nn.Linear(F_HID, D, bias=False)

    def forward(self, x):
        h = rmsnorm(x, self.w, 1e-6)
        return x + self.down(swiglu(self.gate(h), self.up(h)))


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.out = nn.Linear(D, D, bias=False)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.out(x)


model = Stack().to(device="cuda", dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
compiled = torch.compile(model)
report("setup")

for _ in range(3):
    x = torch.randn(16, 512, D, device="cuda", dtype=torch.bfloat16)
    loss = compiled(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
report("compiled_train_custom_ops_three_steps")

x = torch.randn(16, 512, D, device="cuda", dtype=torch.bfloat16)
loss = model(x).float().pow(2).mean()
loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
del loss
report("eager_train_custom_ops_one_step")


@torch.compile
def infer(x):
    y = model(x)
    scale_(y, 0.5)
    return y


with torch.no_grad():
    y = infer(torch.randn(32, 512, D, device="cuda", dtype=torch.bfloat16))
report("compiled_inference_mutating_custom_op")
