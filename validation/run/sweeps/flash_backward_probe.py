"""Flash attention's backward over head dims 24 to 256 (padded to a multiple of 8 by SDPA), bf16, with
the flash backend forced: every allocation and free of the backward in order (sweep_case.py), which
holds softmax_d and the fp32 dq_accum whose head dim mha_bwd rounds. On a GPU:
`python3 flash_backward_probe.py > fixtures/run/sweeps/flash_backward_h200.jsonl`."""

import torch
import torch.nn.functional as F
from sweep_case import case
from torch.nn.attention import SDPBackend, sdpa_kernel

dev = "cuda"


def backward(q, k, v, g):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q, k, v)
    out.backward(g)
    return q.grad


for d in (24, 40, 64, 72, 100, 128, 136, 160, 192, 200, 256):
    for seq in (100, 256):
        q, k, v = (
            torch.randn(2, 4, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
        )
        g = torch.randn(2, 4, seq, d, device=dev, dtype=torch.bfloat16)
        case(f"flash backward d{d} s{seq}", (q, k, v, g), backward, True)
