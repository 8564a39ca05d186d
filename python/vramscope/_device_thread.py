"""The autograd engine's device thread, for the backward passes that record a graph.

On the GPU a backward pass runs on the engine's thread for the device (`Engine::thread_init`),
so the nodes a `create_graph=True` pass records take that thread's sequence numbers
(`at::sequence_number`, thread-local, from 0), which order them after the forward's nodes when a
later pass meets both (the ready queue runs the highest first, `CompareNodeTaskTime`). The
twin's meta tensors would run on the calling thread's CPU queue and number them after the
forward's instead; such passes run here on one long-lived thread of the twin's own, under the
caller's modes, grad mode and autocast state (the engine's `ThreadLocalState`)."""

from __future__ import annotations

import queue
import sys
import threading

import torch
from torch.utils import _python_dispatch

from . import _autocast, _capture


class _Calls:
    """The twin's native device seen from the device thread: it belongs to the capture's thread
    (a PyO3 object of one thread), so each attribute read and call is handed to that thread,
    which waits on `requests` while a pass runs."""

    def __init__(self, real, requests: queue.Queue):
        self._real = real
        self._requests = requests
        self._owner = threading.current_thread()

    def _on_owner(self, fn):
        if threading.current_thread() is self._owner:
            # the owner itself (a storage dying inside one of the calls it serves): at once
            return fn()
        box: dict = {"done": threading.Event()}
        self._requests.put((fn, box))
        box["done"].wait()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def __getattr__(self, name):
        attr = self._on_owner(lambda: getattr(self._real, name))
        if not callable(attr):
            return attr
        return lambda *a, **k: self._on_owner(lambda: attr(*a, **k))


class DeviceThread:
    """One thread that runs backward passes for the capture `cap`, one at a time."""

    def __init__(self, cap):
        self.cap = cap
        self.jobs: queue.Queue = queue.Queue()
        self.requests: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None

    def _loop(self):
        while True:
            job = self.jobs.get()
            if job is None:
                return
            job()
            # the pass's arguments die with it, not at the next pass
            del job

    def stop(self) -> None:
        """End the thread; one left inside a pass its caller gave up on (an interrupt) is a
        daemon and is not waited for."""
        if self.thread is not None:
            self.jobs.put(None)
            self.thread.join(timeout=1.0)  # the twin's own choice: a finished pass ends at once
            self.thread = None

    def run(self, fn):
        """`fn()` on the device thread, as the caller's thread-local state has it; its result or
        its exception comes back. A pass started on the device thread (a reentrant one) runs
        where it is."""
        if threading.current_thread() is self.thread:
            return fn()
        if self.thread is None:
            self.thread = threading.Thread(target=self._loop, name="vramscope-autograd-device", daemon=True)
            self.thread.start()
        functions = [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]
        dispatches = list(_python_dispatch._get_current_dispatch_mode_stack())
        grad = torch.is_grad_enabled()
        autocast = [
            (kind, torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind))
            for kind in ("cuda", "cpu")
        ]
        out: dict = {}
        finished = object()
        # allocations made on the thread are the lines' that started the pass
        caller = sys._getframe(1)

        def job():
            _capture._STATE.capture = self.cap
            _capture._STATE.caller_frame = caller
            for mode in functions:
                torch._C._push_on_torch_function_stack(mode)
            for mode in dispatches:
                _python_dispatch._push_mode(mode)
            before = [
                (kind, torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind))
                for kind, _, _ in autocast
            ]
            try:
                for kind, on, dtype in autocast:
                    torch.set_autocast_enabled(kind, on)
                    torch.set_autocast_dtype(kind, dtype)
                with torch.set_grad_enabled(grad), _autocast.key_on_this_thread():
                    out["value"] = fn()
            except BaseException as e:  # handed back to the caller
                out["error"] = e
            finally:
                for kind, on, dtype in before:
                    torch.set_autocast_enabled(kind, on)
                    torch.set_autocast_dtype(kind, dtype)
                for _ in dispatches:
                    _python_dispatch._pop_mode()
                for _ in functions:
                    torch._C._pop_torch_function_stack()
                _capture._STATE.capture = None
                _capture._STATE.caller_frame = None
                self.requests.put((finished, None))

        real = self.cap.device
        self.cap.device = _Calls(real, self.requests)
        # the pass's ops take the capture's lock on the device thread: the caller, inside an op of
        # its own (`Tensor.backward`), lets it go while it waits (`_threads`)
        lock = self.cap.lock
        held = lock._release_save() if lock._is_owned() else None
        self.jobs.put(job)
        try:
            # serve the device thread's calls on the native device until its pass ends
            while True:
                call, box = self.requests.get()
                if call is finished:
                    break
                try:
                    box["value"] = call()
                except BaseException as e:  # handed back to the device thread
                    box["error"] = e
                box["done"].set()
        finally:
            self.cap.device = real
            if held is not None:
                lock._acquire_restore(held)
        if "error" in out:
            # the error leaves `out`, which its traceback's frames reach (no cycle to outlive it)
            raise out.pop("error")
        return out["value"]


class _Drain:
    """Empties the calling thread's ready queue after a failed pass.

    When a Node raises, the engine stops the pass where it is (`thread_on_exception`). On the GPU
    its device thread goes on popping the pass's queued NodeTasks and drops them, so the gradients
    they carry die as the error unwinds; the twin's pass runs on the calling thread's CPU queue,
    which keeps them until that thread's next pass (torch/csrc/autograd/engine.cpp, `thread_main`).
    A pass over a Node made before the program's (the lowest sequence number, so popped last,
    `CompareNodeTaskTime`) pops them first: their GraphTask is gone, and they are dropped.

    That Node is made on a thread of its own: sequence numbers are per thread
    (`at::sequence_number`, thread-local), and one taken from the calling thread would number the
    program's nodes one past the GPU's, which reorders a later pass over forward nodes and the
    device thread's `create_graph=True` nodes where their numbers meet (blind191/gi04's WGAN-GP
    critic: the H200 runs its LayerNorm's std double backward's MulBackward1 before the forward's
    SubBackward0; the twin, one number up, ran it after)."""

    def __init__(self):
        def make():
            with (
                _python_dispatch._disable_current_modes(),
                torch._C.DisableTorchFunction(),
                torch.enable_grad(),
            ):
                self.leaf = torch.zeros((), requires_grad=True)
                self.root = self.leaf * 1
                self.seed = torch.ones(())

        maker = threading.Thread(target=make, name="vramscope-drain")
        maker.start()
        maker.join()

    def __call__(self) -> None:
        with _python_dispatch._disable_current_modes(), torch._C.DisableTorchFunction():
            torch.autograd.Variable._execution_engine.run_backward(
                (self.root,), (self.seed,), True, False, (self.leaf,), True, False
            )


def _on_device_thread(t_outputs) -> bool:
    """Whether the GPU's engine runs this pass on its device thread: its roots are CUDA tensors
    (`execute_with_graph_task` queues the root on the ready queue of its input buffer's device)
    and the engine may use its threads (compiled autograd turns them off,
    `set_multithreading_enabled(False)` in `compiled_autograd._enable`)."""
    if not torch.autograd.is_multithreading_enabled():
        return False
    roots = t_outputs if isinstance(t_outputs, (tuple, list)) else (t_outputs,)
    return any(isinstance(t, torch.Tensor) and t.is_cuda for t in roots)


def _without_dynamo(fn):
    """`fn()` with no dynamo frame callback on this thread: the callback is thread-local
    (`eval_frame_callback_key`, a `Py_tss_t`, torch/csrc/dynamo/eval_frame.c), so on the GPU the
    Python hooks a pass calls on the device thread run eagerly even when `backward()` is called
    inside a `torch.compile`d function (after its graph break), where on the calling thread dynamo
    would trace them (blind257/ix02: per-parameter AdamW steps in post-accumulate-grad hooks)."""
    from torch._C._dynamo.eval_frame import set_eval_frame

    prior = set_eval_frame(None)
    try:
        return fn()
    finally:
        set_eval_frame(prior)


def patch(cap, p, device_thread: DeviceThread) -> None:
    """Route `torch.autograd`'s engine calls that record a graph to `device_thread`, and drain the
    ready queue of a pass that failed (`_Drain`)."""
    from torch._functorch.pyfunctorch import (
        temporarily_clear_interpreter_stack,
        temporarily_restore_interpreter_stack,
    )

    engine = torch.autograd._engine_run_backward
    drain = _Drain()

    def real(*args, **kwargs):
        try:
            return engine(*args, **kwargs)
        except Exception:
            drain()
            raise

    def run_backward(t_outputs, *args, **kwargs):
        mode = cap._modes[0]
        stack = [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]
        if not any(m is mode for m in stack):
            # the program's `backward()` / `autograd.grad` reached here through the capture's function
            # mode, popped for the call; the engine hands the caller's torch-function stack to the
            # Python it calls (hooks, Function.backward: `at::ThreadLocalState`), which on the GPU runs
            # as the program wrote it: the mode is set again for the pass (the Nodes' ATen kernels,
            # C++ on the GPU, run without it: `_capture._without_function_mode`)
            torch._C._push_on_torch_function_stack(mode)
            try:
                return run_backward(t_outputs, *args, **kwargs)
            finally:
                torch._C._pop_torch_function_stack()
        # (grad_tensors, retain_graph, create_graph, inputs, ...): torch/autograd/__init__.py
        create_graph = args[2] if len(args) > 2 else kwargs.get("create_graph", False)
        if not create_graph:
            if _on_device_thread(t_outputs):
                return _without_dynamo(lambda: real(t_outputs, *args, **kwargs))
            return real(t_outputs, *args, **kwargs)
        if torch._C._functorch.peek_interpreter_stack() is None:
            return device_thread.run(lambda: real(t_outputs, *args, **kwargs))
        # inside functorch's transforms (`grad`, `vjp`, `jacrev`): their levels are thread-local
        # state, which the GPU's engine hands to its device thread with the pass (the functorch
        # TLS of `at::ThreadLocalState`): the levels move there for the pass and come back
        with temporarily_clear_interpreter_stack() as stack:

            def job():
                with temporarily_restore_interpreter_stack(stack):
                    return real(t_outputs, *args, **kwargs)

            return device_thread.run(job)

    p.set(torch.autograd, "_engine_run_backward", run_backward)
