"""Probe for blind257/ix04's H200 error (not run on a GPU yet). Since the twin keeps genuine host
inputs on the host (`_compile._stays_on_host`) it prints what is expected below: "A first raised:
aten::_local_scalar_dense() Expected a value of type 'Tensor' ...", "A second ran through", "B first
ran through"; before, it ran through all three.

Rule to settle: on the first call of an AOT-compiled graph, `_create_runtime_wrapper` runs it under
`_AnalyzeCustomOpInputOutputMode` (torch/_functorch/_aot_autograd/runtime_wrappers.py,
`_FirstInvocationContext`, `config.check_custom_op_aliasing = True`). A Python dispatch mode is
handed a wrapped-number tensor (the `2` of `loss / 2`, which DivBackward0 saves as `other`) as a
Python int (torch::jit::toPyObject), so when Inductor's wrapper reads a CPU 0-d input for a Triton
kernel with `argN_1.item()` the mode calls `_local_scalar_dense(2)`, which raises "Expected a value
of type 'Tensor' for argument 'self' but instead found type 'int'". Compiled autograd lifts the
saved `other` into its graph's inputs. Expected on the GPU: case A raises at its first backward and
runs through at the second (the mode is used once per compiled graph); case B (a CUDA divisor, no
wrapped number) runs through."""

import torch
import torch.nn.functional as F
from torch._dynamo import compiled_autograd

V = 512
w = torch.nn.Parameter(torch.randn(V, 64, device="cuda"))


def backward(divisor):
    x = torch.randn(256, 64, device="cuda")
    tgt = torch.randint(0, V, (256,), device="cuda")
    loss = F.cross_entropy(F.linear(x, w), tgt) / divisor
    try:
        with compiled_autograd._enable(torch.compile(backend="inductor")):
            loss.backward()
        return "ran through"
    except RuntimeError as e:
        return "raised: " + str(e).splitlines()[0]


print("A first", backward(2))
print("A second", backward(2))
torch._dynamo.reset()
print("B first", backward(torch.tensor(2.0, device="cuda")))
print(f"alloc {torch.cuda.memory_allocated()}")
