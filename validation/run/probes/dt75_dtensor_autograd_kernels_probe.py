"""Session 75 (helper dt): what autograd saves for ops on a DTensor, whose kernels a CUDA tensor and
a meta tensor take apart.

    python3 probes/dt75_dtensor_autograd_kernels_probe.py        (from validation/run; < 30 s, < 2 GB)

A DTensor over a world-of-one NCCL group (as blind339/mb03 makes it) is a wrapper subclass whose
device is the local tensor's: on the GPU `cuda`, so its autograd key is AutogradCUDA and C++
composites that read the device (`is_cuda()`) take their CUDA paths on it. For each case it prints
the output's grad_fn, the bytes the forward leaves held above the inputs (the output and what the
node saves), the forward's and the backward's peaks above that base, and the allocations and frees
of the forward from the memory history:
- rms_norm (layer_norm.cpp `rms_norm_symint` calls `_fused_rms_norm` on the DTensor: AutogradCUDA
  has its autograd kernel, FusedRmsNormBackward0 saving input, weight and the fp32 rstd; a meta
  tensor's AutogradMeta has only the composite);
- F.dropout of fp32 and bf16 inputs (Dropout.cpp `is_fused_kernel_acceptable`: `input.is_cuda()`
  takes `native_dropout`, NativeDropoutBackward0 saving a bool mask; otherwise `_dropout_impl`
  keeps a noise tensor like the input for MulBackward0);
- mish (no DTensor strategy: its sharding is found by running its decomposition on meta tensors
  DTensor makes, `DecompShardingStrategy`, which hold no memory; the twin expects a forward peak of
  the output alone; MishBackward0's `mish_backward` on the DTensor: AutogradCUDA's autograd kernel,
  then DTensor decomposes it, having no strategy for it either);
- F.scaled_dot_product_attention of Shard(1) (heads) DTensors (attention.cpp asks the CUDA
  backend choice for a CUDA tensor: the twin takes cuDNN's for bf16 on the H100);
- rms_norm of a jagged nested tensor (a wrapper subclass with a `__torch_function__` of its own,
  which runs `rms_norm`'s composite: on the GPU `_fused_rms_norm` reaches AutogradCUDA's kernel,
  then the nested tensor's `__torch_dispatch__`, which has no rule for it; the twin leaves it to the
  composite, MulBackward0: the GPU's grad_fn, or its error, settles it).
Twin's expectations (dt75_..._twin_h100.out): rms_norm FusedRmsNormBackward0 holding Y and the fp32
rstd; dropout NativeDropoutBackward0 holding the output and a bool mask; mish holding its output,
its forward peak the output.
"""

import os
import socket

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

if "RANK" not in os.environ:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
else:
    dist.init_process_group("nccl")
torch.cuda.set_device(0)
mesh = init_device_mesh("cuda", (1,))
torch.manual_seed(75)


def events(fn):
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    before = len(torch.cuda.memory._snapshot()["device_traces"][0])  # the history is kept across calls
    out = fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap["device_traces"][0][before:]
    evs = [(e["action"][0], e["size"]) for e in trace if e["action"] in ("alloc", "free_requested")]
    return out, evs


def case(tag, make, fn):
    inputs = make()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    try:
        out, evs = events(lambda inputs=inputs: fn(*inputs))
    except Exception as e:
        print(f"{tag}: forward RAISED {type(e).__name__}: {str(e)[:200]}")
        return
    held = torch.cuda.memory_allocated() - base
    fwd_peak = torch.cuda.max_memory_allocated() - base
    name = type(out.grad_fn).__name__ if out.grad_fn is not None else None
    print(f"{tag}: grad_fn {name} held {held} fwd_peak {fwd_peak}")
    print(f"{tag}: fwd events {evs}")
    torch.cuda.reset_peak_memory_stats()
    out = out.to_local() if hasattr(out, "to_local") else out.values()
    try:
        out.float().sum().backward()
        print(f"{tag}: bwd_peak {torch.cuda.max_memory_allocated() - base}")
    except Exception as e:
        print(f"{tag}: backward RAISED {type(e).__name__}: {str(e)[:200]}")
    del out, inputs
    torch.cuda.empty_cache()


def activation(shape, dtype, placement=1):
    x = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
    return distribute_tensor(x, mesh, [Shard(placement)])


B, T, D = 4, 512, 1024
for dtype in (torch.float32, torch.bfloat16):
    n = str(dtype).split(".")[1]
    case(
        f"rms_norm {n}",
        lambda dtype=dtype: (
            activation((B, T, D), dtype),
            distribute_tensor(
                torch.ones(D, device="cuda", dtype=dtype, requires_grad=True), mesh, [Replicate()]
            ),
        ),
        lambda x, w: F.rms_norm(x, (D,), w),
    )
    case(
        f"dropout {n}", lambda dtype=dtype: (activation((B, T, D), dtype),), lambda x: F.dropout(x, 0.1, True)
    )
    case(f"mish {n}", lambda dtype=dtype: (activation((B, T, D), dtype),), lambda x: F.mish(x))
H, HD = 16, 64
case(
    "sdpa bfloat16",
    lambda: tuple(activation((B, H, T, HD), torch.bfloat16) for _ in range(3)),
    lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
)
# a jagged nested tensor is a wrapper subclass too, with a `__torch_function__` of its own, which
# runs `rms_norm`'s composite on it: `_fused_rms_norm` reaches its `__torch_dispatch__` (no rule for
# it in torch/nested/_internal/ops.py: the composite, `func._op_dk`) below AutogradCUDA's kernel
# on the GPU, and FusedRmsNormBackward0's `_fused_rms_norm_backward` has no composite to fall to
case(
    "rms_norm jagged float32",
    lambda: (
        torch.nested.nested_tensor_from_jagged(
            torch.randn(2048, D, device="cuda", requires_grad=True),
            torch.tensor([0, 512, 2048], device="cuda"),
        ),
        torch.ones(D, device="cuda", requires_grad=True),
    ),
    lambda x, w: F.rms_norm(x, (D,), w),
)
dist.destroy_process_group()
