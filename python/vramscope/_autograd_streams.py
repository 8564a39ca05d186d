"""The autograd engine's streams.

A Node's stream is the one current when the forward made it (torch/csrc/autograd/function.h); the
engine runs the Node's backward there (engine.cpp), and `InputBuffer::add` (input_buffer.cpp) records
a gradient on its consumer Node's stream where the Node that produced it ran on another
(`record_stream_any_impl`), so the gradient's block, freed, waits for that stream; a backward's seed
gradients, made on the stream current at the call, are the first producers of their root Nodes.
Measured: validation/run/streams_probe_s37.py on the H200 (its memory history).

From the first op that makes Nodes while a stream other than the default one is current, the twin
tags each Node an op makes with its stream (in the Node's `metadata`; an untagged Node is the
default stream's), hooks each Node that hands a gradient to a Node of another stream, and runs a
tagged Node's backward ops on its stream. A program whose autograd ops all run on the default
stream pays nothing.
"""

from __future__ import annotations

import torch

from ._tensor import is_ours
from ._tensor import tensors_in as _tensors

#: the key of a Node's stream in its `metadata`
KEY = "vramscope.stream"


def stream_of(node) -> int:
    """The stream `node` was made on (the default stream, 0, where untagged or where the Node keeps
    no metadata)."""
    try:
        return node.metadata.get(KEY, 0)
    except (AttributeError, RuntimeError):
        return 0


def inputs_of(args, kwargs) -> list:
    """The Nodes of an op's inputs, taken before it runs (an in-place op gives its input a new one)."""
    return [t.grad_fn for t in _tensors((args, kwargs)) if t.grad_fn is not None]


def tag(cap, out, held) -> None:
    """Tag the Nodes an op just made with the current stream `cap.stream` (those reachable from its
    outputs' `grad_fn` short of its inputs' Nodes `held` and of tagged ones; a leaf's
    AccumulateGrad is made at its first use, so an untagged one is tagged here too), and hook each
    that hands a gradient to a Node of another stream."""
    cap.autograd_streams = True
    try:
        _tag(cap, cap.stream, out, held)
    except (AttributeError, RuntimeError):
        # a Node that keeps no metadata or takes no hook: its gradients go as the default stream's
        pass


def _tag(cap, stream, out, held) -> None:
    """`tag`'s walk, on `stream`."""
    # (`held` keeps the inputs' Node objects alive while their ids are compared: a C++ Node's
    # Python object lives only while referenced, and a new one may take a freed one's id)
    inputs = {id(n) for n in held}
    todo = [t.grad_fn for t in _tensors(out) if t.grad_fn is not None]
    while todo:
        node = todo.pop()
        meta = node.metadata
        if KEY in meta or id(node) in inputs:
            continue
        meta[KEY] = stream
        across = []
        for i, (nxt, _) in enumerate(node.next_functions):
            if nxt is None:
                continue
            if KEY not in nxt.metadata and id(nxt) not in inputs:
                if isinstance(nxt, torch._C._functions.AccumulateGrad):
                    nxt.metadata[KEY] = stream
                else:
                    todo.append(nxt)
                continue
            consumer = stream_of(nxt)
            if consumer != stream:
                across.append((i, consumer))
        if across:
            node.register_hook(_recorder(cap, across))


def _record(cap, grad, stream) -> None:
    if grad is not None and is_ours(grad):
        handle = cap.handle_of(grad)
        if handle is not None:
            cap.device.record_stream(handle, stream)


def _recorder(cap, across):
    """A post hook recording the gradients of outputs `across` (index, consumer stream)."""

    def record(grad_inputs, grad_outputs):
        for i, consumer in across:
            _record(cap, grad_inputs[i] if i < len(grad_inputs) else None, consumer)

    return record


def node_stream(cap):
    """The stream of the Node whose backward is running, where the twin tags Nodes and it is not
    the current one (None otherwise)."""
    if not cap.autograd_streams:
        return None
    node = torch._C._current_autograd_node()
    if node is None:
        return None
    stream = stream_of(node)
    return stream if stream != cap.stream else None


def patch(cap, p) -> None:
    """A backward's seed gradients are recorded on their root Node's stream where it is not the
    current one (engine.cpp's `execute`: the root's `InputBuffer::add` from the current stream)."""
    real = torch.autograd._engine_run_backward

    def run_backward(t_outputs, *args, **kwargs):
        if cap.autograd_streams and args:
            for out, grad in zip(t_outputs, args[0], strict=False):
                node = out.grad_fn if isinstance(out, torch.Tensor) else None
                if node is not None and stream_of(node) != cap.stream:
                    _record(cap, grad, stream_of(node))
        return real(t_outputs, *args, **kwargs)

    p.set(torch.autograd, "_engine_run_backward", run_backward)
