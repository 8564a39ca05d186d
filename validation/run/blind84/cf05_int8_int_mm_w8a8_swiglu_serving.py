"""W8A8 serving of a stack of Llama-7B-sized SwiGLU MLPs (4,096 -> 11,008 -> 4,096, 8 layers) with
`torch._int_mm`: fp16 weights quantized per output channel to int8 on the GPU (absmax, round,
clamp), then activations quantized per token on the fly, int8 x int8 -> int32 matmuls dequantized
by the two scales, RMSNorm and residuals in fp16; a 4 x 1,024-token prefill and 32 single-token
decode steps at batch 32 (over `_int_mm`'s 16-row minimum); then the fp16 reference of the first
layer and its error; 4 phases."""

import os

import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8405)
D, H, LAYERS, B, L, DEC = (64, 128, 2, 2, 16, 2) if SMALL else (4096, 11008, 8, 4, 1024, 32)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32


def quantize_weight(w):
    scale = w.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-5) / 127
    q = torch.clamp(torch.round(w.float() / scale), -128, 127).to(torch.int8)
    return q.t(), scale.t().to(dtype)


def int8_linear(x, wq_t, w_scale):
    rows = x.reshape(-1, x.shape[-1])
    x_scale = rows.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-5) / 127
    xq = torch.clamp(torch.round(rows.float() / x_scale), -128, 127).to(torch.int8)
    y = torch._int_mm(xq, wq_t)
    y = (y.float() * x_scale * w_scale.float()).to(dtype)
    return y.view(*x.shape[:-1], -1)


def mlp(x, layer):
    gate, up, down, norm = layer
    h = F.rms_norm(x, (D,), norm)
    return x + int8_linear(F.silu(int8_linear(h, *gate)) * int8_linear(h, *up), *down)


layers, fp16_first = [], None
for i in range(LAYERS):
    w_gate = torch.randn(H, D, device=device, dtype=dtype) * 0.02
    w_up = torch.randn(H, D, device=device, dtype=dtype) * 0.02
    w_down = torch.randn(D, H, device=device, dtype=dtype) * 0.02
    if i == 0:
        fp16_first = (w_gate.cpu(), w_up.cpu(), w_down.cpu())
    norm = torch.ones(D, device=device, dtype=dtype)
    layers.append((quantize_weight(w_gate), quantize_weight(w_up), quantize_weight(w_down), norm))
    del w_gate, w_up, w_down
if device == "cuda":
    print(f"quantized {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    x = torch.randn(B, L, D, device=device, dtype=dtype)
    for layer in layers:
        x = mlp(x, layer)
    if device == "cuda":
        print(f"prefill peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    tok = torch.randn(32, 1, D, device=device, dtype=dtype)
    for _ in range(DEC):
        y = tok
        for layer in layers:
            y = mlp(y, layer)
        tok = y.tanh()
    if device == "cuda":
        print(f"decode peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    w_gate, w_up, w_down = (w.to(device) for w in fp16_first)
    x = torch.randn(B, L, D, device=device, dtype=dtype)
    h = F.rms_norm(x, (D,), layers[0][3])
    ref = x + F.linear(F.silu(F.linear(h, w_gate)) * F.linear(h, w_up), w_down)
    err = (mlp(x, layers[0]) - ref).float().pow(2).mean().sqrt()
if device == "cuda":
    print(f"reference peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
