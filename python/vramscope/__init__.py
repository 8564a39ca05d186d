"""vramscope: how much GPU memory a PyTorch program takes, without the GPU.

`vramscope run train.py` runs a script with its CUDA tensors on the
twin; in Python, ``with vramscope.capture(gpu="h100") as cap: ...`` then
``cap.report()``.
"""

from __future__ import annotations

from ._capture import Capture, current

__all__ = ["Capture", "capture", "phase"]


def capture(gpu: str = "h100", alloc_conf: str | None = None) -> Capture:
    """A context manager running its body on a simulated `gpu`."""
    return Capture(gpu=gpu, alloc_conf=alloc_conf)


def phase(name: str) -> None:
    """Name the phase that starts here (ends the one before it).

    Outside a capture (on a real GPU) it does nothing."""
    cap = current()
    if cap is None:
        return
    cap.mark_phase()
    cap.next_phase = name
    cap.device.reset_peak_memory_stats()
