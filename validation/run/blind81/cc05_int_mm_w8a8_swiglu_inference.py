"""A stack of 8 SwiGLU feed-forward blocks (4,096 wide, 11,008 inner) quantized by hand to int8
weights with per-channel scales (from fp16 weights made on the device), run W8A8 under
`torch.inference_mode`: each activation quantized per token, multiplied with `torch._int_mm` (int8 x
int8 -> int32) and rescaled to fp16, residual RMSNorm between blocks; two batches of 8 x 512 tokens;
3 phases."""

import os

import torch

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8105)
D, F, N, B, L = (32, 64, 2, 2, 16) if SMALL else (4096, 11008, 8, 8, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32


def quantize_weight(w):
    # w: (out, in) -> int8 (in, out) for x @ w.T, and a per-output-channel scale
    scale = w.abs().amax(dim=1).clamp(min=1e-5) / 127.0
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q.t().contiguous(), scale.to(dtype)


def w8a8(x, qw, sw):
    sx = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-5) / 127.0
    qx = torch.round(x / sx).clamp(-127, 127).to(torch.int8)
    acc = torch._int_mm(qx, qw)
    return acc.to(dtype) * sx * sw


def rms_norm(x, w):
    v = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(v + 1e-6)).to(dtype) * w


blocks = []
for _ in range(N):
    block = {"norm": torch.ones(D, device=device, dtype=dtype)}
    for name, shape in (("gate", (F, D)), ("up", (F, D)), ("down", (D, F))):
        w = torch.randn(shape, device=device, dtype=dtype) * 0.02
        block[name] = quantize_weight(w)
        del w
    blocks.append(block)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    for step in range(2):
        h = torch.randn(B * L, D, device=device, dtype=dtype)
        for blk in blocks:
            x = rms_norm(h, blk["norm"])
            g = w8a8(x, *blk["gate"])
            u = w8a8(x, *blk["up"])
            h = h + w8a8(torch.nn.functional.silu(g) * u, *blk["down"])
            del x, g, u
        out = h.float().norm().item()
        del h
        if device == "cuda":
            peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
            print(f"step {step} {out:.1f} peak {peak} reserved {reserved}")
            torch.cuda.reset_peak_memory_stats()
