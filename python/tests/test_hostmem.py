"""The host zeros that stand in for values the twin does not carry (`_hostmem`)."""

import ctypes
import mmap

import torch
from vramscope import _hostmem


def test_zero_of_a_large_tensor_inside_a_larger_storage_clears_only_its_own_bytes():
    # a slice not aligned to a page, of a storage larger than LAZY_BYTES: the pages wholly inside
    # the slice are handed back, the partial pages at its ends are written, the rest is untouched
    base = torch.full((3 * _hostmem.LAZY_BYTES + 7,), 7, dtype=torch.uint8)
    start, stop = 1001, 1001 + 2 * _hostmem.LAZY_BYTES + 3
    part = base[start:stop]
    assert _hostmem.zero_(part) is part
    assert not part.any()
    assert bool((base[:start] == 7).all()) and bool((base[stop:] == 7).all())


def test_zero_of_floats_and_of_small_or_strided_tensors():
    big = torch.ones(_hostmem.LAZY_BYTES // 2, 3, dtype=torch.float64)
    assert not _hostmem.zero_(big).any()
    small = torch.ones(10)
    assert not _hostmem.zero_(small).any()
    strided = torch.ones(_hostmem.LAZY_BYTES, 2)[:, 0]
    assert not _hostmem.zero_(strided).any()


def test_the_pages_are_handed_back_only_for_private_anonymous_memory():
    t = torch.ones(_hostmem.LAZY_BYTES, dtype=torch.uint8)
    page = mmap.PAGESIZE
    lo = -(-t.data_ptr() // page) * page
    assert _hostmem._private_anonymous(lo, lo + page)
    # a shared mapping (what `share_memory_()` gives) is never handed back, only written
    shared = torch.ones(2 * _hostmem.LAZY_BYTES, dtype=torch.uint8).share_memory_()
    lo = -(-shared.data_ptr() // page) * page
    assert not _hostmem._private_anonymous(lo, lo + page)
    assert not _hostmem.zero_(shared).any()


def test_a_copy_to_the_host_of_a_tensor_without_values_hands_its_pages_back(monkeypatch):
    # save_on_cpu(pin_memory=True)'s `packed.copy_(tensor)`: zeros, with the pages handed back
    from vramscope import capture

    advised = []
    advise = _hostmem._advise_dontneed
    monkeypatch.setattr(_hostmem, "_advise_dontneed", lambda s, n: advised.append(n) or advise(s, n))
    with capture(gpu="h100"):
        # 48 MiB on a private anonymous mapping of the test's own (where glibc puts a tensor of
        # that size hangs on what the process allocated before)
        src = torch.randn(3072, 4096, device="cuda").exp()
        buf = mmap.mmap(-1, 48 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        dst = torch.frombuffer(buf, dtype=torch.float32).view(3072, 4096).fill_(5.0)
        dst.copy_(src)
        assert not dst.any()
    assert advised and advised[0] >= 48 * 1024 * 1024 - mmap.PAGESIZE


def test_a_range_over_adjacent_private_mappings_is_private_anonymous():
    # the kernel splits one mapping in two where its parts' flags differ (here one page made
    # read-only); the range still lies on private anonymous memory only
    page = mmap.PAGESIZE
    buf = mmap.mmap(-1, 4 * page, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    start = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(start, page, mmap.PROT_READ) == 0
    assert _hostmem._private_anonymous(start, start + 4 * page)
    assert libc.mprotect(start, page, mmap.PROT_READ | mmap.PROT_WRITE) == 0
