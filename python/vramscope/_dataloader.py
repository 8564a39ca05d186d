"""A `DataLoader` with workers and `pin_memory=True` under the twin.

With workers, PyTorch pins each batch on a thread of its own (`_pin_memory_loop`,
torch/utils/data/_utils/pin_memory.py), where the twin's modes, which are thread-local, are not
active: the real `pin_memory()` would ask a driver the machine does not have. Here that thread
hands each batch on as it came from the worker, and the loader pins it on the program's thread
when the program takes it (`_MultiProcessingDataLoaderIter._process_data`), as the single-process
loader pins in `_next_data`; its page-locked blocks are then the twin's (`_pinned.py`). The thread
runs on one intra-op thread (`_pin_memory_loop` calls `torch.set_num_threads(1)`), so those pins'
copies start none of OpenMP's workers (`Capture.serial_host`; driver address-space rule 15).

The twin's choice: on the GPU the thread pins up to `prefetch_factor` batches per worker ahead of
the program, so more page-locked blocks are alive at once; they hold no device memory, only the
driver's address space that the blocks take (`docs/driver-placement.md`, rule 16)."""

from __future__ import annotations

import threading

from torch.utils.data import dataloader as _loader
from torch.utils.data._utils import pin_memory as _pin


def patch(cap, p) -> None:
    """Pin a worker loader's batches on the program's thread (the thread that starts the
    capture) while `p` lasts."""
    owner = threading.current_thread()
    real_pin = _pin.pin_memory

    def pin_memory(data, device=None):
        # the pin-memory thread passes batches on; the program's thread pins them
        if threading.current_thread() is not owner:
            return data
        return real_pin(data, device)

    def pin_on_loader_thread(data, device=None):
        # `_pin_memory_loop` calls `torch.set_num_threads(1)` first: the pin's copies run serially
        cap.serial_host += 1
        try:
            return pin_memory(data, device)
        finally:
            cap.serial_host -= 1

    iterator = _loader._MultiProcessingDataLoaderIter
    real_process = iterator._process_data

    def process_data(self, data, worker_idx):
        if self._pin_memory and not isinstance(data, _loader.ExceptionWrapper):
            data = pin_on_loader_thread(data, self._pin_memory_device)
        return real_process(self, data, worker_idx)

    p.set(_pin, "pin_memory", pin_memory)
    p.set(iterator, "_process_data", process_data)
