"""User-written Triton kernels as PyTorch operators the 2.6+ way: `torch.library.triton_op` bodies that
allocate their outputs with torch and launch `@triton.jit` kernels through `torch.library.wrap_triton`,
with `register_autograd` tying forward and backward ops together -- a fused RMSNorm (forward saves
the fp32 reciprocal RMS per row; backward writes dx and per-program partial sums of dw, reduced with
torch) and a fused SwiGLU over one gate/up projection (M, 2H) -> (M, H), its backward writing the
(M, 2H) gradient. Unlike `custom_op`, a `triton_op` is traced through by torch.compile: dynamo and
AOTAutograd see the torch allocations and a `triton_kernel_wrapper_functional` per launch, and Inductor
puts the user kernels into its generated code beside its own. A Llama-style decoder (8 x 2,048, 16
heads, RoPE, MLP 5,632, vocabulary 32,000, untied) in pure bf16 with AdamW (foreach): 3 eager steps at
4 x 2,048, then each block `compile()`d (regional) and 3 more steps, then the compiled model under
inference_mode at 8 x 2,048. Synthetic tokens, seeded. Fixed sizes. 4 phases."""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import Tensor, nn
from torch.library import triton_op, wrap_triton

torch.manual_seed(2724)
dev = "cuda"
V, D, H, L, F_HID, T = 32000, 2048, 16, 8, 5632, 2048


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


@triton.jit
def _rms_fwd(X, W, Y, RSTD, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(RSTD + row, rstd)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _rms_bwd(DY, X, W, RSTD, DX, DWP, stride, N, M, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(ROWS):
        r = pid * ROWS + i
        if r < M:
            x = tl.load(X + r * stride + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + r * stride + cols, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(RSTD + r)
            xhat = x * rstd
            wdy = w * dy
            c = tl.sum(xhat * wdy, axis=0) / N
            tl.store(DX + r * stride + cols, ((wdy - xhat * c) * rstd).to(DX.dtype.element_ty), mask=mask)
            dw += dy * xhat
    tl.store(DWP + pid * N + cols, dw, mask=mask)


@triton.jit
def _swiglu_fwd(GU, OUT, M, HID, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * HID
    row, col = offs // HID, offs % HID
    g = tl.load(GU + row * 2 * HID + col, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(GU + row * 2 * HID + HID + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(OUT + offs, (g * tl.sigmoid(g) * u).to(OUT.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_bwd(DOUT, GU, DGU, M, HID, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * HID
    row, col = offs // HID, offs % HID
    g = tl.load(GU + row * 2 * HID + col, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(GU + row * 2 * HID + HID + col, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DOUT + offs, mask=mask, other=0.0).to(tl.float32)
    s = tl.sigmoid(g)
    dg = do * u * s * (1.0 + g * (1.0 - s))
    du = do * g * s
    tl.store(DGU + row * 2 * HID + col, dg.to(DGU.dtype.element_ty), mask=mask)
    tl.store(DGU + row * 2 * HID + HID + col, du.to(DGU.dtype.element_ty), mask=mask)


@triton_op("jm04::rmsnorm_fwd", mutates_args={})
def rmsnorm_fwd(x: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    m = x2.shape[0]
    y = torch.empty_like(x2)
    rstd = torch.empty(m, device=x.device, dtype=torch.float32)
    wrap_triton(_rms_fwd)[(m,)](x2, w, y, rstd, x2.stride(0), n, eps, BLOCK=triton.next_power_of_2(n))
    return y.view(x.shape), rstd


@triton_op("jm04::rmsnorm_bwd", mutates_args={})
def rmsnorm_bwd(dy: Tensor, x: Tensor, w: Tensor, rstd: Tensor) -> tuple[Tensor, Tensor]:
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    dy2 = dy.reshape(-1, n).contiguous()
    m = x2.shape[0]
    rows = 64
    progs = triton.cdiv(m, rows)
    dx = torch.empty_like(x2)
    dwp = torch.empty(progs, n, device=x.device, dtype=torch.float32)
    wrap_triton(_rms_bwd)[(progs,)](
        dy2, x2, w, rstd, dx, dwp, x2.stride(0), n, m, ROWS=rows, BLOCK=triton.next_power_of_2(n)
    )
    return dx.view(x.shape), dwp.sum(0).to(w.dtype)


def _rms_setup(ctx, inputs, output):
    x, w, _ = inputs
    ctx.save_for_backward(x, w, output[1])


def _rms_backward(ctx, dy, _drstd):
    x, w, rstd = ctx.saved_tensors
    dx, dw = rmsnorm_bwd(dy, x, w, rstd)
    return dx, dw, None


rmsnorm_fwd.register_autograd(_rms_backward, setup_context=_rms_setup)


@triton_op("jm04::swiglu_fwd", mutates_args={})
def swiglu_fwd(gu: Tensor) -> Tensor:
    hid = gu.shape[-1] // 2
    m = gu.numel() // (2 * hid)
    out = torch.empty(*gu.shape[:-1], hid, device=gu.device, dtype=gu.dtype)
    wrap_triton(_swiglu_fwd)[(triton.cdiv(m * hid, 1024),)](gu, out, m, hid, BLOCK=1024)
    return out


@triton_op("jm04::swiglu_bwd", mutates_args={})
def swiglu_bwd(dout: Tensor, gu: Tensor) -> Tensor:
    hid = gu.shape[-1] // 2
    m = gu.numel() // (2 * hid)
    dgu = torch.empty_like(gu)
    wrap_triton(_swiglu_bwd)[(triton.cdiv(m * hid, 1024),)](dout.contiguous(), gu, dgu, m, hid, BLOCK=1024)
    return dgu


def _swiglu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _swiglu_backward(ctx, dout):
    return swiglu_bwd(dout, ctx.saved_tensors[0])


swiglu_fwd.register_autograd(_swiglu_backward, setup_context=_swiglu_setup)


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return torch.ops.jm04.rmsnorm_fwd(x, self.weight, 1e-6)[0]


def rope(q, cos, sin):
    q1, q2 = q.chunk(2, dim=-1)
    return torch.cat((q1 * cos - q2 * sin, q2 * cos + q1 * sin), dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(D), RMSNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.gate_up, self.down = nn.Linear(D, 2 * F_HID, bias=False), nn.Linear(F_HID, D, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, D))
        return x + self.down(torch.ops.jm04.swiglu_fwd(self.gate_up(self.n2(x))))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm, self.head = RMSNorm(D), nn.Linear(D, V, bias=False)
        hd = D // H
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(T).float(), inv)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        cos, sin = self.cos[:t].to(torch.bfloat16), self.sin[:t].to(torch.bfloat16)
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return self.head(self.norm(x))


gen = torch.Generator().manual_seed(5)


def batch(b):
    data = torch.randint(0, V, (b, T + 1), generator=gen).to(dev)
    return data[:, :-1], data[:, 1:]


model = Llama().to(dev).to(torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, foreach=True)
report("setup")


def train(steps):
    for _ in range(steps):
        x, y = batch(4)
        loss = F.cross_entropy(model(x).view(-1, V).float(), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss.item()


print("eager loss", train(3))
report("eager")
for blk in model.blocks:
    blk.compile()
print("compiled loss", train(3))
report("compiled")
with torch.inference_mode():
    x, y = batch(8)
    logits = model(x)
    print("eval loss", F.cross_entropy(logits.view(-1, V).float(), y.reshape(-1)).item())
    del logits
report("inference")
