"""Backward passes that record a graph run on the twin's autograd device thread
(`vramscope._device_thread`), as a GPU's run on the engine's thread for the device."""

from __future__ import annotations

import pytest
import torch


def test_a_recorded_backward_numbers_its_nodes_on_the_device_thread():
    """The nodes `create_graph=True` records take the device thread's sequence numbers, which
    start at 0, below the forward's (blind83/ce05 and blind45/as04 are exact on the H200 so)."""
    import vramscope

    # the calling thread numbers past 1,000 (each op that records a node takes one)
    t = torch.ones(2, requires_grad=True)
    for _ in range(1000):
        t = t * 1.0
    with vramscope.capture(gpu="h200"):
        x = torch.randn(64, 64, device="cuda", requires_grad=True)
        y = (x.sin() * x).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        forward_nr = y.grad_fn._sequence_nr()
        grad_nr = g.grad_fn._sequence_nr()
        g.sum().backward()
    assert forward_nr > 1000
    assert grad_nr < 100
    assert x.grad is not None


def test_a_recorded_backward_inside_autocast_casts_as_a_plain_one():
    """The engine's device thread takes its caller's thread-local state (`ThreadLocalState`: autocast's
    and the dispatcher's key sets), and a CUDA tensor carries the AutocastCUDA key there too: a
    `create_graph=True` pass run inside a bf16 region casts its matmuls as the caller's own pass
    would. The device thread lacked the key the capture includes for its meta tensors, so nothing
    was cast (the gradient's last node was the fp32 MmBackward0)."""
    import vramscope

    with vramscope.capture(gpu="h100"):
        x = torch.randn(256, 1024, device="cuda")
        w = torch.randn(1024, 1024, device="cuda", requires_grad=True)
        loss = (x @ w).tanh().sum()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            (g,) = torch.autograd.grad(loss, w, create_graph=True)
        # the bf16 mm, then the engine's cast back to the fp32 input's dtype (`validate_outputs`)
        assert g.dtype == torch.float32
        assert g.grad_fn.name() == "ToCopyBackward0"
        assert g.grad_fn.next_functions[0][0].name() == "MmBackward0"


def test_the_capture_takes_no_sequence_number_of_the_calling_thread():
    """The program's nodes are numbered as on the GPU: the twin's own Node (`_Drain`'s) is made on
    a thread of its own (blind191/gi04: one number up reordered a pass over the forward's nodes and a
    double backward's)."""
    import vramscope

    t = torch.ones(2, requires_grad=True)
    before = (t * 1.0).grad_fn._sequence_nr()
    with vramscope.capture(gpu="h200"):
        x = torch.randn(8, device="cuda", requires_grad=True)
        first = (x * 2.0).grad_fn._sequence_nr()
    assert first == before + 1


def test_an_error_in_a_recorded_backward_reaches_the_caller():
    import vramscope

    class Fails(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2

        @staticmethod
        def backward(ctx, grad):
            raise ValueError("backward says no")

    with vramscope.capture(gpu="h200"):
        x = torch.randn(8, device="cuda", requires_grad=True)
        with pytest.raises(ValueError, match="backward says no"):
            torch.autograd.grad(Fails.apply(x).sum(), x, create_graph=True)
        # the capture goes on after it
        (g,) = torch.autograd.grad((x * x).sum(), x, create_graph=True)
        assert g.shape == (8,)


def test_a_pass_inside_functorch_grad_numbers_its_nodes_on_the_device_thread():
    """`torch.func.grad` runs its pass with `create_graph=True` under its own level; the GPU's
    engine hands functorch's levels (thread-local state) to the device thread with it, so the
    nodes it records for the outer level take the device thread's numbers (blind90/cl02's
    allocations then come in the H200's order, entry for entry)."""
    import vramscope

    t = torch.ones(2, requires_grad=True)
    for _ in range(1000):
        t = t * 1.0
    with vramscope.capture(gpu="h200"):
        w = torch.randn(64, 64, device="cuda", requires_grad=True)
        x = torch.randn(64, device="cuda")
        g = torch.func.grad(lambda v: (v @ w).sin().sum())(x)
        grad_nr = g.grad_fn._sequence_nr()
        g.pow(2).sum().backward()
        # functorch's levels are back on the calling thread after the pass
        assert torch._C._functorch.peek_interpreter_stack() is None
    assert grad_nr < 100
    assert w.grad is not None and w.grad.shape == (64, 64)


def test_allocations_of_a_recorded_backward_belong_to_the_line_that_ran_it():
    """The device thread's own frames are the threading module's: its allocations are named by
    the program's line that started the pass."""
    import sys

    import vramscope

    with vramscope.capture(gpu="h200") as cap:
        x = torch.randn(1024, 1024, device="cuda", requires_grad=True)
        y = (x.sin() * x).sum()
        line = sys._getframe().f_lineno + 1
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        del y
    sources = cap.report()["at_peak"]["by_source"]
    here = f"test_device_thread.py:{line} in {sys._getframe().f_code.co_name}"
    assert not any("threading.py" in s for s in sources)
    assert any(s.endswith(here) for s in sources)
    assert g.shape == (1024, 1024)


def _kept(root):
    """The nodes of `root`'s graph holding a double backward's copies (`_kernels.attach_saved`)."""
    # the wrappers stay referenced, so their ids are not reused while the walk runs
    seen, held, todo, kept = set(), [], [root], []
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        held.append(node)
        if node.metadata.get("vramscope_saved"):
            kept.append(node)
        todo.extend(n for n, _ in node.next_functions)
    return kept


def test_a_recorded_double_backward_keeps_its_copies_with_the_new_nodes():
    """Under create_graph, ConvolutionBackwardBackward0's contiguous copies (of gO.transpose(0, 1))
    are saved by the convolutions it records and live until those nodes have run (blind91/cm04, a
    Hutchinson trace's third-order pass)."""
    import vramscope

    def block(cin, cout):
        return [torch.nn.Conv2d(cin, cout, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(cout), torch.nn.ReLU()]

    with vramscope.capture(gpu="h200"):
        net = torch.nn.Sequential(
            *block(3, 8), *block(8, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 64, 4)
        ).cuda()
        params = list(net.parameters())
        loss = net(torch.randn(4, 3, 8, 8, device="cuda")).pow(2).sum()
        grads = torch.autograd.grad(loss, params, create_graph=True)
        vs = [torch.randn_like(p) for p in params]
        hvs = torch.autograd.grad(grads, params, vs, create_graph=True)
        trace = sum((h * v).sum() for h, v in zip(hvs, vs, strict=True))
        kept = _kept(trace.grad_fn)
        assert kept and all(n.name() == "ConvolutionBackward0" for n in kept)
        trace.backward()
        assert not _kept(trace.grad_fn)


def test_a_capture_dropped_on_another_thread_keeps_its_device_for_its_own_thread():
    """A garbage collection on the device thread can drop a capture the calling thread made; its
    native device (a PyO3 object of one thread) is parked for that thread, not dropped where it
    cannot be (which raised an unraisable error whose traceback's frames kept a later capture's
    tensors alive)."""
    import gc
    import sys
    import threading

    from vramscope import _capture

    gc.collect()  # earlier captures (each in a cycle of its own) dropped here, on this thread
    errors = []
    before = sys.unraisablehook
    sys.unraisablehook = lambda args: errors.append(args.exc_value)
    try:
        box = [_capture.Capture(gpu="h200")]

        def drop():
            box.clear()
            gc.collect()

        dropper = threading.Thread(target=drop)
        dropper.start()
        dropper.join()
    finally:
        sys.unraisablehook = before
    assert errors == []
    assert len(_capture._PARKED) == 1
    _capture.Capture(gpu="h200")
    assert _capture._PARKED == []


def _hooks_traced(compiled_autograd: bool, device: str) -> list:
    """Whether dynamo traced a post-accumulate-grad hook that a backward inside a compiled
    function calls (after the graph break at `backward()`), one entry per call."""
    import vramscope

    seen: list = []
    torch._dynamo.reset()
    prior = torch._dynamo.config.compiled_autograd
    torch._dynamo.config.compiled_autograd = compiled_autograd
    try:
        with vramscope.capture(gpu="h200"):
            w = torch.nn.Parameter(torch.randn(8, 8, device=device))
            w.register_post_accumulate_grad_hook(lambda p: seen.append(torch.compiler.is_compiling()))

            def step(x):
                loss = (x @ w).sum()
                loss.backward()
                return loss.detach()

            torch.compile(step, backend="eager")(torch.randn(4, 8, device=device))
    finally:
        torch._dynamo.config.compiled_autograd = prior
        torch._dynamo.reset()
    return seen


def test_hooks_of_a_pass_on_the_device_thread_run_without_dynamo():
    """On the GPU a CUDA pass runs on the engine's device thread, which has no dynamo frame callback
    (thread-local: torch/csrc/dynamo/eval_frame.c's `eval_frame_callback_key`), so a hook called
    by a `backward()` inside a compiled function runs eagerly (blind257/ix02's per-parameter AdamW
    hooks without compiled autograd); a CPU pass runs on the calling thread, where dynamo traces
    it, on the twin as on the GPU."""
    assert _hooks_traced(False, "cuda") == [False]
    assert _hooks_traced(False, "cpu") == [True]


@pytest.mark.parametrize("create_graph", [False, True])
def test_python_called_by_the_backward_builds_host_data_on_the_simulated_gpu(create_graph):
    """A Function's backward and a tensor hook that make a tensor from host data on the device
    (`torch.tensor(..., device=g.device)`, `torch.as_tensor`, `.cuda()`) run under the capture's
    function mode, as the program's forward does: `backward()` reaches the engine through that mode,
    popped for the call, and without it `torch.tensor`'s host-then-copy path (tensor_new.cpp) went to
    the host's CUDA ("Found no NVIDIA driver")."""
    import vramscope

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            two = torch.tensor([2.0], device=g.device) + torch.as_tensor([0.0], device="cuda")
            return g * two * torch.ones(1).cuda()

    seen = []
    with vramscope.capture(gpu="h200") as cap:
        x = torch.randn(256, 256, device="cuda", requires_grad=True)
        x.register_hook(lambda g: seen.append(torch.tensor([1.0, 2.0], device=g.device).device) or g)
        y = Scale.apply(x).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=create_graph)
        allocated = torch.cuda.memory_allocated()
    assert seen == [torch.device("cuda", 0)]
    assert g.shape == (256, 256) and allocated >= 2 * 256 * 256 * 4
    assert cap.cuda_used
