"""FP8 inference of a Llama-style FFN stack written by hand with `torch._scaled_mm`: e4m3 weights
quantised once with per-tensor scales, activations quantised per call from their amax, bf16
outputs, SwiGLU, 16 layers of width 4096 (hidden 14336), 16,384 tokens per batch, 2 batches under
`inference_mode`; 3 phases."""

import os

import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4901)
D, HID, LAYERS, TOK = (64, 128, 2, 32) if SMALL else (4096, 14336, 16, 16384)
device = "cuda" if torch.cuda.is_available() else "cpu"
E4M3 = torch.float8_e4m3fn
MAX = torch.finfo(E4M3).max


def quantize(t):
    scale = t.abs().amax().float().clamp(min=1e-12) / MAX
    return (t / scale).to(E4M3), scale


def fp8_linear(x, w8, w_scale):
    x8, x_scale = quantize(x)
    if device == "cuda":
        return torch._scaled_mm(x8, w8.t(), scale_a=x_scale, scale_b=w_scale, out_dtype=torch.bfloat16)
    return (x8.float() * x_scale) @ (w8.float() * w_scale).t()


layers = []
for _ in range(LAYERS):
    ws = [torch.randn(o, i, device=device, dtype=torch.bfloat16) * 0.02 for o, i in ((2 * HID, D), (D, HID))]
    layers.append([quantize(w) for w in ws])
    del ws
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    for batch in range(2):
        x = torch.randn(TOK, D, device=device, dtype=torch.bfloat16)
        for (up, up_s), (down, down_s) in layers:
            g, u = fp8_linear(x, up, up_s).to(torch.bfloat16).chunk(2, -1)
            x = x + fp8_linear(F.silu(g) * u, down, down_s).to(torch.bfloat16)
            del g, u
        out = x.float().mean()
        del x, out
        if device == "cuda":
            peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
            print(f"batch {batch} peak {peak} reserved {reserved}")
            torch.cuda.reset_peak_memory_stats()
