"""cuSOLVER's gesvdj workspace as `apply_svd_cusolver_gesvdj` asks for it: the lwork (elements of
the matrix's type) that `cusolverDn<t>gesvdj_bufferSize` returns for an m x n matrix, econ being
`full_matrices=False`, as a closed form of the H200's figures (torch 2.11.0+cu130, CUDA 13.0):
fixtures/run/svd/svd_probe_h200.json, whose 20 x 20 grid of sizes (3,200 calls: both econ, both
jobz, S and D) it reproduces exactly, as it does the probe's recorded 33 x 33 and 300 x 200 calls.
jobz and the type (in elements) never change lwork. The grid's sizes are mostly multiples of 32:
forms that fit the whole grid equally well (`_VARIANTS`) disagree on some other sizes, by at most
31 elements (where 32-element padding falls) or, for a short side above 256, by how the floor
grows; `gesvdj_lwork_bounds` gives their least and most."""

from __future__ import annotations

import itertools


def _pad(x: int) -> int:
    """x rounded up to a multiple of 32 elements (each of the workspace's pieces)."""
    return -(-x // 32) * 32


def _square(n: int) -> int:
    """lwork of an n x n matrix (the pieces' sizes as the fit has them: 2 n^2, 64 columns of n,
    1,024, and n + 4 t^2 + t with t = ceil(n / 32))."""
    tiles = -(-n // 32)
    return _pad(2 * n * n) + 64 * _pad(n) + 1024 + _pad(n + 4 * tiles * tiles + tiles)


def _lwork(m: int, n: int, econ: bool, floor_steps: bool, pad_lk: bool, pad_r: bool) -> int:
    """One form that fits the grid (the flags pick among the forms that fit it equally well)."""
    if m == n:
        return _square(n)
    big, k = max(m, n), min(m, n)
    # a floor of 768 Ki elements, growing with k above 256 (the grid shows k = 384 only)
    grow = -(-k // 128) * 128 if floor_steps else k
    floor = 1024 * (512 + max(256, grow)) + _pad(k) + 32
    if econ:
        lk = _pad(big * k) if pad_lk else big * k
        qr = lk + 256 * big + _pad(k * k) + 512 * k + 2 * _pad(k) + 65792
    else:
        qr = _pad(big * (k + 1)) + 768 * big + _pad(k * k) + _pad(k) + 65792
    if m > n:
        # tall: also the square form of k, plus k^2
        r = _pad(k * k) if pad_r else k * k
        return max(floor, qr, _square(k) + r)
    # wide: without the square form, plus m n
    return max(floor, qr) + _pad(m * n)


#: the forms that reproduce every figure of the grid: they differ only off it
_VARIANTS = tuple(itertools.product((False, True), repeat=3))


def gesvdj_lwork_bounds(m: int, n: int, econ: bool) -> tuple[int, int]:
    """The least and the most lwork (elements) that the forms fitting the H200's grid give an
    m x n matrix (m, n >= 1): equal on the grid and wherever the grid determines the size."""
    if m < 1 or n < 1:
        raise ValueError(f"gesvdj_lwork: sizes must be positive, got {m} x {n}")
    values = [_lwork(m, n, econ, *v) for v in _VARIANTS]
    return min(values), max(values)


def gesvdj_lwork(m: int, n: int, econ: bool) -> int | None:
    """gesvdj's lwork (elements) for an m x n matrix, or None where the fitting forms disagree."""
    lo, hi = gesvdj_lwork_bounds(m, n, econ)
    return lo if lo == hi else None
