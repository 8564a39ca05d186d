"""The autograd engine's streams for gradients handed across them.

A Node's stream is the one current when the forward made it (torch/csrc/autograd/function.h), and
`InputBuffer::add` (input_buffer.cpp) records a gradient on its consumer Node's stream when the Node
that produced it ran on another (`record_stream_any_impl`), so the gradient's block, freed, waits
for that stream. The twin tags each Node made while a stream other than the default one is current
with that stream (in the Node's `metadata`; an untagged Node is the default stream's), and where
such a Node hands a gradient to a Node of another stream, a post hook of the Node records the
gradient on the consumer's stream.
"""

from __future__ import annotations

from ._tensor import is_ours
from ._tensor import tensors_in as _tensors

#: the key of a Node's stream in its `metadata`
KEY = "vramscope.stream"


def stream_of(node) -> int:
    """The stream `node` was made on (the default stream, 0, where untagged)."""
    return node.metadata.get(KEY, 0)


def tag(cap, out, args, kwargs) -> None:
    """Tag the Nodes an op just made on the current stream `cap.stream` (those reachable from its
    outputs' `grad_fn` short of its inputs' own and of tagged ones; a leaf's AccumulateGrad is made
    at its first use, so an untagged one is tagged here too), and hook each that hands a gradient
    to a Node of another stream."""
    stream = cap.stream
    inputs = {id(t.grad_fn) for t in _tensors((args, kwargs)) if t.grad_fn is not None}
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
                if type(nxt).__name__ == "AccumulateGrad":
                    nxt.metadata[KEY] = stream
                else:
                    todo.append(nxt)
                continue
            consumer = stream_of(nxt)
            if consumer != stream:
                across.append((i, consumer))
        if across:
            node.register_hook(_recorder(cap, across))


def _recorder(cap, across):
    """A post hook recording the gradients of outputs `across` (index, consumer stream)."""

    def record(grad_inputs, grad_outputs):
        for i, consumer in across:
            grad = grad_inputs[i] if i < len(grad_inputs) else None
            if grad is not None and is_ours(grad):
                handle = cap.handle_of(grad)
                if handle is not None:
                    cap.device.record_stream(handle, consumer)

    return record
