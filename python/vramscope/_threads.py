"""Threads of the program's own that do CUDA work under the twin.

A program may start threads that run CUDA ops: a producer that pins batches and copies them to
the device (`.pin_memory().cuda(non_blocking=True)`) for the training loop to take from a queue,
or transformers' weight loading (`from_pretrained(..., device_map="cuda")` copies each tensor to
the device on a `ThreadPoolExecutor` of its own, transformers/core_model_loading.py). The twin's
modes are thread-local (PyTorch's mode stacks are), so such a thread would run the real ops and
ask a driver the machine does not have. Here a thread that the program's code starts runs under
the capture's two modes, and its ops share the one simulated device with the program's thread,
as on the GPU every thread of a process allocates from the one caching allocator.

A thread starts with PyTorch's defaults, not its parent's thread-local state (grad mode on,
autocast off, no modes of the program's own, the default stream current): only the capture's
modes are pushed, and its current stream is its own (`Capture.stream`). Its ops run
one at a time with the other threads' (`Capture.lock`: the twin's Python state is shared); on
the GPU they interleave under the allocator's mutex in an order set by timing, which the twin
takes from Python's thread switches. The threads PyTorch starts itself (the DataLoader's
pin-memory thread, Inductor's compile workers) are left as they were (`_dataloader.py`), but for
torch.distributed.checkpoint's writer and upload threads, which copy the program's tensors."""

from __future__ import annotations

import os
import sys
import threading

import torch
from torch.utils import _python_dispatch

from . import _autocast, _capture

_STDLIB = os.path.dirname(threading.__file__)
_TORCH = os.path.dirname(torch.__file__)
_HERE = os.path.dirname(os.path.abspath(__file__))
_EXAMPLES = os.path.join(_HERE, "examples")
#: torch.distributed.checkpoint's threads copy the program's tensors to the host: the writer threads
#: of `FileSystemWriter(thread_count=N)` (filesystem.py `_write_data`: `tensor.cpu()` of each GPU
#: tensor) and `async_save`'s upload thread (`_ThreadBasedAsyncCheckpointExecutor`), as a thread of
#: the program's own would
_DCP = os.path.join(_TORCH, "distributed", "checkpoint") + os.sep


def _started_by_program(frame) -> bool:
    """Whether the code that started a thread is the program's (or a library's it uses), not
    PyTorch's or the twin's own: the first frame outside Python's standard library (which
    `ThreadPoolExecutor.submit` and `Thread.start` run in) decides."""
    while frame is not None and frame.f_code.co_filename.startswith(_STDLIB):
        frame = frame.f_back
    if frame is None:
        return False
    fn = frame.f_code.co_filename
    if fn.startswith(_DCP):
        return True
    if fn.startswith(_TORCH):
        return False
    return not fn.startswith(_HERE) or fn.startswith(_EXAMPLES)


def patch(cap, p) -> None:
    """Run the threads that the program starts while `p` lasts under `cap`'s modes."""
    real_start = threading.Thread.start

    def start(self):
        if (
            _capture.current() is cap
            and not self.name.startswith("vramscope-")
            and _started_by_program(sys._getframe(1))
        ):
            self._vramscope_capture = cap
            run = self.run

            # the thread starts on the default stream (PyTorch's current stream is per thread)
            default = cap.current_stream_obj[0]

            def run_under_capture():
                _capture._STATE.capture = cap
                _capture._STATE.own_streams = [0, [default]]
                function_mode, dispatch_mode = cap._modes
                torch._C._push_on_torch_function_stack(function_mode)
                _python_dispatch._push_mode(dispatch_mode)
                try:
                    # an autocast region the thread enters itself casts as on the GPU
                    with _autocast.key_on_this_thread():
                        run()
                finally:
                    _python_dispatch._pop_mode()
                    torch._C._pop_torch_function_stack()
                    _capture._STATE.capture = None
                    _capture._STATE.own_streams = None

            self.run = run_under_capture
        return real_start(self)

    p.set(threading.Thread, "start", start)
