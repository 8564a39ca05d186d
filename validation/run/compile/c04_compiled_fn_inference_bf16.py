"""A @torch.compile'd function (not a module): a pre-norm transformer stack of 8 layers, 1024 wide,
16 heads (bf16 weights held in a list), run under torch.no_grad for batch 16 of 1024 tokens, then
once more for batch 32 (a recompile); 3 phases (the weights, each call)."""

import os

import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3104)
L, D, H, B, T = (2, 64, 4, 2, 32) if SMALL else (8, 1024, 16, 16, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16


def w(*shape):
    return (torch.randn(*shape, device=device) * 0.02).to(dtype)


layers = [
    {"qkv": w(3 * D, D), "proj": w(D, D), "fc": w(4 * D, D), "out": w(D, 4 * D), "n1": w(D), "n2": w(D)}
    for _ in range(L)
]


@torch.compile
def forward(x, layers):
    b, t, _ = x.shape
    for p in layers:
        h = F.layer_norm(x, (D,), p["n1"])
        q, k, v = F.linear(h, p["qkv"]).split(D, dim=2)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + F.linear(a.transpose(1, 2).reshape(b, t, D), p["proj"])
        h = F.layer_norm(x, (D,), p["n2"])
        x = x + F.linear(F.gelu(F.linear(h, p["fc"]), approximate="tanh"), p["out"])
    return x.float().softmax(-1)


if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    for batch in (B, 2 * B):
        x = torch.randn(batch, T, D, device=device, dtype=dtype)
        y = forward(x, layers)
        del x, y
        if device == "cuda":
            print(f"batch {batch} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
            torch.cuda.reset_peak_memory_stats()
