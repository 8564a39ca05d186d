"""Session 69 (helper kx): blind309/kx04's phases 1-2 (simulation, MUSIC in complex128) statement by
statement (plain `python3`, one GPU, about 5 s, < 4 GB): after each statement the allocated bytes and the
peak since the previous line (peak reset after each print), and the alloc/free events of the eigh and the
einsum (memory history, sizes in bytes). The H100 peaked 664,805,376 bytes above the twin in phase 2 with
626 MiB more reserved: which statement, and how much is cuSOLVER's syevjBatched workspace."""

import math

import torch

torch.manual_seed(30904)
device = "cuda"
M, SRC, T, BATCH, GRID = 16, 3, 256, 2048, 1801
ant = torch.arange(M, device=device, dtype=torch.float32)


def mark(tag):
    torch.cuda.synchronize()
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def events(tag, fn):
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    out = fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ev = []
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            ev.append(f"+{e['size']}")
        elif e["action"] == "free_requested":
            ev.append(f"-{e['size']}")
    print(f"{tag} events: {' '.join(ev)}")
    return out


def steering(theta):
    phase = -math.pi * ant[:, None] * torch.sin(theta)[..., None, :]
    return torch.polar(torch.ones_like(phase), phase)


def cgauss(*shape, scale=1.0):
    s = scale / math.sqrt(2)
    return torch.complex(torch.randn(*shape, device=device) * s, torch.randn(*shape, device=device) * s)


mark("start")
theta = (torch.rand(BATCH, SRC, device=device) - 0.5) * math.pi * 0.9
A = steering(theta)
X = torch.bmm(A, cgauss(BATCH, SRC, T)) + cgauss(BATCH, M, T, scale=10 ** (-10 / 20))
R = X @ X.mH / T
mark("simulate")
grid = torch.linspace(-math.pi / 2, math.pi / 2, GRID, device=device, dtype=torch.float64)
a_grid = torch.polar(
    torch.ones(M, GRID, device=device, dtype=torch.float64),
    -math.pi * ant.double()[:, None] * torch.sin(grid),
)
mark("grid")
Rd = R.to(torch.cdouble)
mark("to cdouble")
evals, evecs = events("eigh", lambda: torch.linalg.eigh(Rd))
mark("eigh")
En = evecs[..., : M - SRC]
proj = events("einsum", lambda: torch.einsum("bmk,mg->bkg", En.conj(), a_grid))
mark("einsum")
mag = proj.abs()
mark("abs")
sq = mag.pow(2)
mark("pow")
spectrum = 1.0 / sq.sum(1)
mark("sum and reciprocal")
del mag, sq
peaks = spectrum.topk(SRC, dim=-1).indices
mark("topk")
