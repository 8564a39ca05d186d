"""blind275/jp02's sliding-window branch alone (helper rp, session 62): which SDPA backend takes a bf16
query of (2, 16, 2,048, 64) in the (B, T, H, D) dense layout, a key of (2, 4, 2,048, 64) likewise, a value
that is a view of the fused kv projection (strides of a (B, T, 2, 4, 64) tensor), a 2-D boolean band
mask of 256 and `enable_gqa=True`, and what its forward and backward allocate. The twin sends it to cuDNN
(2.11's priority order on sm_90, the mask made additive by `convert_boolean_attn_mask_cudnn`, GQA
native); `torch.backends.cuda.can_use_*_attention` print the GPU's own choice. Run plainly on the GPU
(`python3 rp62_nsa_band_sdpa_cudnn_gqa_bool_mask_probe_s62.py`) and under the twin (`vramscope run --gpu
h100`); each line prints the bytes allocated over the step's start and the step's peak over it. No
value-dependent size. The twin (6edf9b00's package, GPU=h100) printed:
  strides q (2097152, 64, 1024, 1) k (524288, 64, 256, 1) v (1048576, 64, 512, 1)
  cudnn usable: True / flash usable: False / efficient usable: False
  forward: allocated +17040384 peak +17040896   (output 8 MiB, logsumexp, seed/offset, and the additive
           mask of 8 MiB kept for the backward)
  backward: allocated +3931136 peak +46400000
  no_grad forward: allocated +8388608 peak +16778752"""

import torch
import torch.nn.functional as F
from torch.backends.cuda import SDPAParams

dev = "cuda"
torch.manual_seed(0)
B, T, HQ, HKV, HD, WIN = 2, 2048, 16, 4, 64, 256


def step(tag, fn):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    print(
        f"{tag}: allocated +{torch.cuda.memory_allocated() - base} "
        f"peak +{torch.cuda.max_memory_allocated() - base} reserved {torch.cuda.memory_reserved()}"
    )
    return out


q_lin = torch.randn(B, T, HQ * HD, device=dev, dtype=torch.bfloat16, requires_grad=True)
kv_lin = torch.randn(B, T, 2 * HKV * HD, device=dev, dtype=torch.bfloat16, requires_grad=True)
q = q_lin.view(B, T, HQ, HD).transpose(1, 2) * 1.0
k, v = kv_lin.view(B, T, 2, HKV, HD).permute(2, 0, 3, 1, 4)
k = k * 1.0
pos = torch.arange(T, device=dev)
band = (pos[:, None] >= pos[None]) & (pos[:, None] - pos[None] < WIN)
print("strides q", q.stride(), "k", k.stride(), "v", v.stride())
for name in ("cudnn", "flash", "efficient"):
    fn = getattr(torch.backends.cuda, f"can_use_{name}_attention")
    params = SDPAParams(q, k, v, band, 0.0, False, True)
    print(name, "usable:", fn(params, False))
out = step("forward", lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=band, enable_gqa=True))
g = torch.randn_like(out)
step("backward", lambda: out.backward(g))
with torch.no_grad():
    step("no_grad forward", lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=band, enable_gqa=True))
print("done")
