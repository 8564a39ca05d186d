"""vramscope: how much GPU memory a PyTorch program takes, without the GPU.

`vramscope run train.py` runs a script with its CUDA tensors on the
twin; in Python, ``with vramscope.capture(gpu="h100") as cap: ...`` then
``cap.report()``.

The package imports torch only where it is used (`capture`, `Capture`): the
other commands are the native module's, and `vramscope run` starts before it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._capture import Capture

__all__ = ["Capture", "capture", "phase"]


def __getattr__(name: str):
    """`Capture` and `current`, from `_capture` (imported at first use)."""
    if name in ("Capture", "current"):
        from . import _capture

        return getattr(_capture, name)
    raise AttributeError(f"module 'vramscope' has no attribute {name!r}")


def capture(gpu: str = "h100", alloc_conf: str | None = None) -> Capture:
    """A context manager running its body on a simulated `gpu`."""
    from ._capture import Capture

    return Capture(gpu=gpu, alloc_conf=alloc_conf)


def phase(name: str) -> None:
    """Name the phase that starts here (ends the one before it).

    Outside a capture (on a real GPU) it does nothing."""
    module = sys.modules.get(__name__ + "._capture")
    cap = None if module is None else module.current()
    if cap is None:
        return
    cap.mark_phase()
    cap.next_phase = name
    cap.device.reset_peak_memory_stats()
