"""A user-defined operator made with `torch.library.custom_op`: a fused RMSNorm-and-SwiGLU gate
whose CUDA implementation is plain PyTorch code, with `register_fake` for its shapes and
`register_autograd` (the backward recomputes through autograd of the same code); 8 blocks of width
2048 (hidden 5632) over batch 16 x 512 tokens, bf16 weights, AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5302)
B, T, D, H, L = (2, 8, 32, 64, 2) if SMALL else (16, 512, 2048, 5632, 8)
device = "cuda" if torch.cuda.is_available() else "cpu"


def _gate(x, w_norm, w_gate, w_up):
    h = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w_norm
    return torch.nn.functional.silu(h @ w_gate.t()) * (h @ w_up.t())


@torch.library.custom_op("blind53::rms_swiglu", mutates_args=())
def rms_swiglu(
    x: torch.Tensor, w_norm: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor
) -> torch.Tensor:
    return _gate(x, w_norm, w_gate, w_up)


@rms_swiglu.register_fake
def _(x, w_norm, w_gate, w_up):
    return x.new_empty(*x.shape[:-1], w_gate.shape[0])


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):
    saved = [t.detach().requires_grad_() for t in ctx.saved_tensors]
    with torch.enable_grad():
        out = _gate(*saved)
    return torch.autograd.grad(out, saved, grad)


rms_swiglu.register_autograd(_backward, setup_context=_setup)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.Parameter(torch.ones(D))
        self.gate = nn.Parameter(torch.randn(H, D) * 0.02)
        self.up = nn.Parameter(torch.randn(H, D) * 0.02)
        self.down = nn.Linear(H, D, bias=False)

    def forward(self, x):
        return x + self.down(rms_swiglu(x, self.norm, self.gate, self.up))


model = nn.Sequential(*[Block() for _ in range(L)]).to(device, torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, T, D, device=device, dtype=torch.bfloat16)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
