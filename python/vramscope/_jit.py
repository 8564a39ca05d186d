"""TorchScript's graph passes whose checks read a constant tensor's device in C++, where the twin's
CUDA tensors are meta: the twin applies the rewrite such a check would let through on the GPU."""

from __future__ import annotations

import torch

# torch/csrc/jit/passes/frozen_conv_add_relu_fusion_cuda.cpp, `fuseFrozenConvAddReluImpl`: its
# patterns, registered in this order (conv, then relu, then add)
_CONV_RELU = """
graph(%input, %weight, %bias, %stride:int[], %padding:int[], %dilation:int[], %groups:int):
  %x = aten::{conv}(%input, %weight, %bias, %stride, %padding, %dilation, %groups)
  %res = aten::{relu}(%x)
  return (%res)"""
_CONV_RELU_FUSED = """
graph(%input, %weight, %bias, %stride:int[], %padding:int[], %dilation:int[], %groups:int):
  %res = aten::cudnn_convolution_relu(%input, %weight, %bias, %stride, %padding, %dilation, %groups)
  return (%res)"""
_CONV_ADD_RELU = """
graph(%input, %weight, %bias, %z, %alpha, %stride:int[], %padding:int[], %dilation:int[], %groups:int):
  %x = aten::{conv}(%input, %weight, %bias, %stride, %padding, %dilation, %groups)
  %y = aten::{add}(%x, %z, %alpha)
  %res = aten::{relu}(%y)
  return (%res)"""
_CONV_ADD_RELU_FUSED = """
graph(%input, %weight, %bias, %z, %alpha, %stride:int[], %padding:int[], %dilation:int[], %groups:int):
  %res = aten::cudnn_convolution_add_relu(%input, %weight, %z, %alpha, %bias,
                                          %stride, %padding, %dilation, %groups)
  return (%res)"""

_CONVS = ("aten::conv2d", "aten::conv3d")
_ADDS = ("aten::add", "aten::add_")
_HELD = "prim::VramscopeHeld_"


def _constant(value):
    """The tensor a graph value holds as a constant, else None (`toIValue`)."""
    node = value.node()
    if node.kind() != "prim::Constant" or value.type().kind() != "TensorType":
        return None
    t = value.toIValue()
    return t if isinstance(t, torch.Tensor) else None


def _cuda(t) -> bool:
    return t.device.type == "cuda"


def _weight_fails(node) -> bool:
    """The pass's filter on a conv's weight and bias: the weight a constant contiguous CUDA
    tensor; a constant bias of its dtype, 1-D, one value an output channel, on CUDA."""
    weight = _constant(node.inputsAt(1))
    if weight is None or not _cuda(weight) or not weight.is_contiguous():
        return True
    bias = _constant(node.inputsAt(2))
    return bias is not None and (
        bias.dtype != weight.dtype or bias.dim() != 1 or bias.size(0) != weight.size(0) or not _cuda(bias)
    )


def _z_fails(add, conv) -> bool:
    """The filter on the added tensor `z`, where a constant: of the weight's dtype, its first
    size the weight's, contiguous, on CUDA."""
    z = _constant(add.inputsAt(1))
    if z is None:
        return False
    weight = _constant(conv.inputsAt(1))
    return z.dtype != weight.dtype or z.size(0) != weight.size(0) or not z.is_contiguous() or not _cuda(z)


def _swap(graph, node, kind):
    """`node` replaced by one of `kind` on the same inputs (its output's type and uses kept)."""
    new = graph.create(kind, list(node.inputs()), 1)
    new.insertBefore(node)
    new.output().setType(node.output().type())
    node.output().replaceAllUsesWith(new.output())
    node.destroy()
    return new


def _hold(graph, node):
    """`node` swapped for a placeholder no pattern names: (the placeholder, the kind to restore)."""
    kind = node.kind()
    return _swap(graph, node, _HELD + kind.split("::")[1]), kind


def fuse_frozen_conv_add_relu(graph) -> None:
    """The CUDA pass's rewrite of a frozen graph (`aten::conv2d`/`conv3d` + `add`/`add_` +
    `relu`/`relu_` into `aten::cudnn_convolution_add_relu`, conv + relu into
    `cudnn_convolution_relu`), where its filter would let a match through on the GPU: the nodes
    whose constants it refuses are held out of the patterns while they run."""
    held = []
    for node in list(graph.nodes()):
        if node.kind() in _CONVS and _weight_fails(node):
            held.append(_hold(graph, node))
    for node in list(graph.nodes()):
        if node.kind() in _ADDS and node.inputsAt(0).node().kind() in _CONVS:
            if _z_fails(node, node.inputsAt(0).node()):
                held.append(_hold(graph, node))
    for conv in ("conv2d", "conv3d"):
        for relu in ("relu", "relu_"):
            torch._C._jit_pass_custom_pattern_based_rewrite_graph(
                _CONV_RELU.format(conv=conv, relu=relu), _CONV_RELU_FUSED, graph
            )
            for add in ("add", "add_"):
                torch._C._jit_pass_custom_pattern_based_rewrite_graph(
                    _CONV_ADD_RELU.format(conv=conv, add=add, relu=relu), _CONV_ADD_RELU_FUSED, graph
                )
    for node, kind in held:
        _swap(graph, node, kind)


def optimize_for_inference_pass(original):
    """`torch._C._jit_pass_optimize_for_inference` (torch/jit/_freeze.py's
    `optimize_for_inference`): PyTorch's passes (FuseFrozenConvAddRelu, ConvertFrozenOpsToMKLDNN,
    FrozenLinearTranspose on each method's graph), then the conv-add-relu fusion its filter
    refused the twin's meta constants (torch/csrc/jit/passes/frozen_graph_optimizations and
    `optimize_for_inference` in torch/csrc/jit/api/module.cpp)."""

    def optimize(module, other_methods=()):
        original(module, other_methods)
        for name in ["forward", *other_methods]:
            method = module._get_method(name) if module._has_method(name) else None
            if method is not None:
                fuse_frozen_conv_add_relu(method.graph)

    return optimize
