"""The program's own processes under the spawn start method (`multiprocessing.Process` after
`mp.set_start_method("spawn")`, hogwild training), doing CUDA work.

A child the program spawns for code of its own (not a DataLoader's or a pool's worker) starts the
twin before `spawn_main` with the parent's GPU and allocator settings; its figures are its own
process's, unreported. A simulated CUDA tensor pickled for it arrives as a simulated tensor of the
same sizes, strides, dtype and `requires_grad` with no block in the child's allocator: on the GPU
`reduce_tensor` sends the storage's allocation as a CUDA IPC handle, allocating nothing, and
`rebuild_cuda_tensor` maps it with `cudaIpcOpenMemHandle`, outside the child's caching allocator
(torch/multiprocessing/reductions.py)."""

from __future__ import annotations

import atexit
import os
import threading

import torch

from ._tensor import registered

#: the capture of a spawned child (`child`), None elsewhere
_CHILD: list = [None]
#: the `Process` being launched on this thread (`Popen._launch`), read by `get_command_line`
_launching = threading.local()


def patch(cap, p) -> None:
    """Start a spawned child of the program under the twin, and pickle simulated CUDA tensors
    for it as such, while `p` lasts."""
    import multiprocessing.spawn as spawn

    try:
        import multiprocessing.popen_spawn_posix as popen_spawn
    except ImportError:  # Windows: its spawn Popen is another module, not patched
        return

    from torch.multiprocessing import reductions

    real_launch = popen_spawn.Popen._launch
    real_command = spawn.get_command_line

    def _launch(self, process_obj):
        _launching.process = process_obj
        try:
            return real_launch(self, process_obj)
        finally:
            _launching.process = None

    def get_command_line(**kwds):
        cmd = real_command(**kwds)
        if not _programs(getattr(_launching, "process", None)) or "-c" not in cmd:
            return cmd
        i = cmd.index("-c") + 1
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        cmd[i] = (
            f"import sys; sys.path.insert(0, {package!r}); import vramscope._processes as _vp; "
            f"_vp.child({cap.gpu!r}, {cap.alloc_conf!r}); " + cmd[i]
        )
        return cmd

    p.set(popen_spawn.Popen, "_launch", _launch)
    p.set(spawn, "get_command_line", get_command_line)

    from multiprocessing.reduction import ForkingPickler

    def wrap(real):
        def reduce_tensor(t):
            if registered(t):
                return (rebuild, (type(t), tuple(t.size()), t.stride(), t.dtype, t.requires_grad))
            return real(t)

        return reduce_tensor

    reducers = dict(ForkingPickler._extra_reducers)
    for cls, fn in list(reducers.items()):
        if fn is reductions.reduce_tensor:
            reducers[cls] = wrap(fn)
    p.set(ForkingPickler, "_extra_reducers", reducers)


#: the modules whose processes stay outside the twin: library workers (a DataLoader's, a process
#: pool's, Inductor's compile workers) that do host work
_LIBRARY = ("torch.", "concurrent.", "multiprocessing.")


def _programs(process) -> bool:
    """Whether `process` runs the program's own code (its target defined outside the libraries)."""
    target = getattr(process, "_target", None)
    module = getattr(target, "__module__", None) or ""
    return target is not None and not module.startswith(_LIBRARY)


def rebuild(cls, size, stride, dtype, requires_grad):
    """A CUDA tensor received from the program's parent process: in a child under the twin, a
    simulated tensor with no block (the parent's allocation, mapped); elsewhere a meta tensor, as
    the simulated tensor pickled before."""
    with torch._C._DisableTorchDispatch():
        t = torch.empty_strided(size, stride, dtype=dtype, device="meta")
    cap = _CHILD[0]
    if cap is not None:
        t = cap.track(t, "cuda_ipc::open", "input", nbytes=0)
    if issubclass(cls, torch.nn.Parameter):
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t


def child(gpu: str, alloc_conf) -> None:
    """Start the twin in a spawned child, before `spawn_main` unpickles its target and runs it;
    closed at the child's exit."""
    from ._capture import Capture
    from ._run import _hide_real_gpus

    _hide_real_gpus()
    cap = Capture(gpu=gpu, alloc_conf=alloc_conf)
    from . import _dist

    _dist.setup_from_script(cap)
    cap.__enter__()
    _CHILD[0] = cap

    def close():
        _CHILD[0] = None
        cap.__exit__(None, None, None)
        cap.close()

    atexit.register(close)
