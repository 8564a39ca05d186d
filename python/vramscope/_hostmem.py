"""Host memory for values the twin does not carry: zeros whose pages the kernel maps only when they
are read, so that a program's large copies to the host (an offloaded KV cache, `save_on_cpu`'s
pinned buffers) cost the machine running the twin no memory until something reads them."""

from __future__ import annotations

import ctypes
import math
import mmap
import sys

import torch

#: the smallest host tensor whose whole pages are handed back rather than written (a cost bound of
#: the twin, not a PyTorch constant)
LAZY_BYTES = 1 << 20

#: madvise(2)'s MADV_DONTNEED (Linux): a private anonymous page is zero-filled on its next touch
_MADV_DONTNEED = 4

_madvise = None


def zeros(shape, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous host tensor of zeros on calloc'd memory (numpy's `zeros`), whose pages the kernel
    maps on first touch."""
    try:
        import numpy as np
    except ImportError:
        return torch.zeros(tuple(shape), dtype=dtype)
    numel = math.prod(shape)
    raw = torch.from_numpy(np.zeros(numel * dtype.itemsize, dtype=np.uint8))
    return raw.view(dtype).view(tuple(shape))


def _private_anonymous(start: int, end: int) -> bool:
    """Whether [start, end) lies inside private anonymous mappings of this process (the heap or
    unnamed mappings in /proc/self/maps, adjacent ones in a row, as the kernel splits a mapping whose
    parts differ in flags): never a file's pages or shared memory."""
    at = start
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                if hi <= at:
                    continue
                path = fields[5].strip() if len(fields) > 5 else ""
                if lo > at or not fields[1].endswith("p") or path not in ("", "[heap]"):
                    return False
                at = hi
                if end <= at:
                    return True
    except (OSError, ValueError, IndexError):
        return False
    return False


def _advise_dontneed(start: int, length: int) -> bool:
    global _madvise
    if _madvise is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        libc.madvise.restype = ctypes.c_int
        _madvise = libc.madvise
    return _madvise(start, length, _MADV_DONTNEED) == 0


def zero_(t: torch.Tensor) -> torch.Tensor:
    """`t.zero_()` for a host tensor; for a large contiguous one on private anonymous memory (Linux),
    its whole pages are handed back to the kernel (MADV_DONTNEED zero-fills them on their next touch)
    and only the partial pages at its two ends are written."""
    nbytes = t.numel() * t.element_size()
    if sys.platform != "linux" or t.device.type != "cpu" or nbytes < LAZY_BYTES or not t.is_contiguous():
        return t.zero_()
    start = t.data_ptr()
    end = start + nbytes
    page = mmap.PAGESIZE
    lo = -(-start // page) * page
    hi = end // page * page
    if hi <= lo or not _private_anonymous(lo, hi) or not _advise_dontneed(lo, hi - lo):
        return t.zero_()
    raw = t.reshape(-1).view(torch.uint8)
    raw[: lo - start].zero_()
    raw[hi - start :].zero_()
    return t
