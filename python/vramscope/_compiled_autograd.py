"""Compiled autograd (`torch._dynamo.config.compiled_autograd = True`, `compiled_autograd._enable`)
for the simulated GPU: PyTorch's own capture and compile, as `_compile` runs dynamo's.

When `backward()` runs with an autograd compiler set, the C++ engine
(torch/csrc/dynamo/python_compiled_autograd.cpp) walks the autograd graph, lifts the tensors the
nodes hold (saved tensors, parameters, the root's gradient) into one list of inputs and, on a
cache miss, traces the graph into an FX graph through `AutogradCompilerInstance`
(torch/_dynamo/compiled_autograd.py: `begin_capture` wraps the inputs as fake tensors, each node's
backward is applied to them, a compiled forward's AOT backward graph is pasted in whole,
`end_capture` hands the graph to `torch.compile`). Then, unless `retain_graph`, every node's saved
variables are released, and the compiled graph runs on the list of inputs, which it steals
(`set_locals_to_steal(graph, ["inputs"])`): a saved tensor lives until its last use in the
compiled backward, as Inductor's wrapper frees it, not until the end of its node.

Under the twin the capture runs on the host, as dynamo's traces do (`_compile.TRACING`): the inputs
become fake tensors of the host, and the devices the C++ engine reads from the simulated tensors
(the meta device: a simulated tensor is a meta tensor to C++) in the input metadata it passes to
Python (`validate_outputs`' and each backward's output metadata) are the host's, as they are
`cuda:0` on the GPU. The graph is then compiled by dynamo and Inductor as a compiled region
(`_compile._region`), so its wrapper's allocations and frees run on the twin.
"""

from __future__ import annotations

import torch

from . import _compile

_META = torch.device("meta")


def _host_device(x):
    """A device the C++ engine read from a simulated tensor (meta), as the host's."""
    return _compile._HOST if isinstance(x, torch.device) and x == _META else x


def _begin_capture(original):
    """`begin_capture` with fake tensors made on the host until the capture closes (`end_capture`
    closes the instance's exit stack; the engine closes it on an error)."""

    def begin_capture(self, *args, **kwargs):
        _compile.TRACING[0] += 1
        self.stack.callback(_leave_tracing)
        try:
            return original(self, *args, **kwargs)
        except BaseException:
            self.stack.close()
            raise

    return begin_capture


def _leave_tracing():
    _compile.TRACING[0] -= 1


def _to_proxy(original):
    """`to_proxy` with the metadata's meta device given as the host's (the constants of the graph's
    `validate_outputs` and of functional backward calls)."""

    def to_proxy(self, t):
        if isinstance(t, torch.device):
            return _host_device(t)
        return original(self, t)

    return to_proxy


def _proxy_call_backward(original):
    """`proxy_call_backward`, whose gradients' fake tensors are made from the output metadata's
    (layout, device, dtype, size): the device the host's."""

    def proxy_call_backward(self, inputs, output_metadatas, *args, **kwargs):
        metas = [m if m is None else (m[0], _host_device(m[1]), *m[2:]) for m in output_metadatas]
        return original(self, inputs, metas, *args, **kwargs)

    return proxy_call_backward


def _end_capture(original, cap):
    """`end_capture`, its compiled graph run as a compiled region: dynamo traces it on the host at
    its first call, and its wrapper's buffers come from the twin."""

    def end_capture(self, outputs):
        runtime_wrapper, compiled = original(self, outputs)
        return runtime_wrapper, _compile._region(cap, _call(compiled))

    return end_capture


def _call(compiled):
    def call(*args, **kwargs):
        return compiled(*args, **kwargs)

    return call


def patch(p, cap) -> None:
    """Install the above on `torch._dynamo.compiled_autograd` once it is imported."""

    def install(ca):
        instance = ca.AutogradCompilerInstance
        p.set(instance, "begin_capture", _begin_capture(instance.begin_capture))
        p.set(instance, "to_proxy", _to_proxy(instance.to_proxy))
        p.set(instance, "proxy_call_backward", _proxy_call_backward(instance.proxy_call_backward))
        p.set(instance, "end_capture", _end_capture(instance.end_capture, cap))

    p.when_imported("torch._dynamo.compiled_autograd", install)
