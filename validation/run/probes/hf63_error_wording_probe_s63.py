# ruff: noqa: E501
"""How torch 2.11 on the GPU words a failed broadcast and a device mismatch (session 63, helper hf): plain
python3, a second or two. The twin's lines since 4efd91ae (`vramscope run --gpu h100 --quiet THIS`) are the
ones below; the wrapper lines follow 2.11's libtorch_cpu.so strings (adaption.cpp), the others the host's.

    mul: The size of tensor a (4) must match the size of tensor b (1540) at non-singleton dimension 0
    masked_fill: The size of tensor a (4) must match the size of tensor b (2) at non-singleton dimension 0
    mul_: The size of tensor a (4) must match the size of tensor b (5) at non-singleton dimension 0
    cuda*host: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!
    host+cuda: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!
    cuda.mul_(host): Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!
    cuda*host0dim: ok (4, 3)
    embedding(host ids): Expected all tensors to be on the same device, but got index is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA__index_select)
    host@cuda: Expected all tensors to be on the same device, but got mat2 is on cuda:0, different from other tensors on cpu (when checking argument in method wrapper_CUDA_mm)
"""

import torch

r = lambda *s: torch.randn(*s, device="cuda")  # noqa: E731
cases = {
    "mul": lambda: r(4, 64) * r(1540, 1),
    "masked_fill": lambda: r(2, 3).masked_fill(r(4, 3) > 0, 0.0),
    "mul_": lambda: r(4, 3).mul_(r(5, 3)),
    "cuda*host": lambda: r(4, 3) * torch.ones(3),
    "host+cuda": lambda: torch.ones(3) + r(4, 3),
    "cuda.mul_(host)": lambda: r(4, 3).mul_(torch.ones(4, 3)),
    "cuda*host0dim": lambda: r(4, 3) * torch.tensor(2.0),
    "embedding(host ids)": lambda: torch.nn.Embedding(10, 4).cuda()(torch.zeros(3, dtype=torch.long)),
    "host@cuda": lambda: torch.zeros(3, 3) @ r(3, 3),
}
for name, f in cases.items():
    try:
        print(f"{name}: ok {tuple(f().shape)}")
    except RuntimeError as e:
        print(f"{name}: {e}")
