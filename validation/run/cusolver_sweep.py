"""cuSOLVER's device workspaces as PyTorch's CUDA linalg kernels allocate them, swept over sizes on a GPU.

    OUT=DIR python validation/run/cusolver_sweep.py run    -> DIR/cusolver_sweep.jsonl   (on a GPU)
    python validation/run/cusolver_sweep.py table FILE     -> each case's workspaces, one line each

One line per call: the case (op, dtype, m, n) and every allocation and free the call made through the
caching allocator, in order (`torch.cuda.memory._record_memory_history` without frames), so that the
workspaces can be read by their place in the sequence the twin's `_linalg.py` documents:
- `linalg_qr` (reduced): Q, R, tau, info, geqrf's workspace, info, orgqr's workspace;
- `linalg_eigh`: vectors, values, infos, then syevj's (fp32 of 32 to 512 rows) or syevd's workspace;
- `linalg_lu_factor` of one square matrix: LU, pivots, info, getrf's workspace.
Each call runs on a warmed device (handles made) with the cache emptied first; `FEW=1` sweeps a handful.
"""

import json
import os
import sys
import time

import torch

SQUARE = [1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 31, 32, 33, 48, 63, 64, 65, 96, 100, 127, 128, 129, 160]
SQUARE += [192, 197, 200, 224, 255, 256, 257, 300, 320, 384, 400, 448, 500, 511, 512, 513, 576, 640]
SQUARE += [700, 768, 800, 896, 960, 1000, 1023, 1024, 1025, 1152, 1280, 1500, 1536, 1600, 1792, 2000]
SQUARE += [2047, 2048, 2049, 2304, 2560, 3000, 3072, 3584, 4000, 4096, 5000, 6144, 8192]
TALL_M = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
TALL_N = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
WIDE = [(8, 64), (32, 256), (64, 1024), (256, 2048), (512, 4096), (1024, 8192)]


def cases():
    few = os.environ.get("FEW") == "1"
    square = [1, 64, 512, 2048] if few else SQUARE
    for dtype in (torch.float32, torch.float64):
        for n in square:
            yield "qr", dtype, n, n
            if n <= 4096 or dtype == torch.float32:
                yield "eigh", dtype, n, n
            yield "lu_factor", dtype, n, n
        for m in [] if few else TALL_M:
            for n in TALL_N:
                if n < m:
                    yield "qr", dtype, m, n
        for m, n in [] if few else WIDE:
            yield "qr", dtype, m, n


def call(op, a):
    if op == "qr":
        return torch.linalg.qr(a)
    if op == "eigh":
        return torch.linalg.eigh(a)
    return torch.linalg.lu_factor(a)


def workspaces(line):
    """The call's cuSOLVER workspaces in order: the allocations it also freed, less the 4-byte infos,
    the 1-byte checks, tau (min(m, n) elements) and a column-major clone of A (m x n)."""
    size = 4 if line["dtype"] == "float32" else 8
    m, n = line["m"], line["n"]
    known = {1, 4, min(m, n) * size, m * n * size}
    temps = []
    for action, nbytes in line["events"]:
        if action == "alloc":
            temps.append([nbytes, False])
        else:
            for t in temps:
                if t[0] == nbytes and not t[1]:
                    t[1] = True
                    break
    return [b for b, freed in temps if freed and b not in known]


def table(path):
    """The twin's table (`python/vramscope/cusolver_h200.json`): each routine's measured device
    bytes by its key in `_linalg.py` (geqrf and getrf: m, n, dtype; orgqr: m, k, k, dtype, the
    reduced Q; syevj and syevd: n, dtype, by `_eigh_routine`'s choice for one matrix). A case whose
    workspaces are not the routine's count is reported on stderr and left out."""
    out = {"geqrf": [], "orgqr": [], "syevj": [], "syevd": [], "getrf": []}
    with open(path) as lines:
        for text in lines:
            line = json.loads(text)
            m, n, dtype, got = line["m"], line["n"], line["dtype"], workspaces(line)
            want = 2 if line["op"] == "qr" else 1
            if len(got) != want:
                print(f"left out: {line['op']} {dtype} {m} x {n}: workspaces {got}", file=sys.stderr)
            elif line["op"] == "qr":
                k = min(m, n)
                out["geqrf"].append([m, n, dtype, got[0]])
                out["orgqr"].append([m, k, k, dtype, got[1]])
            elif line["op"] == "eigh":
                routine = "syevj" if dtype == "float32" and 32 <= n <= 512 else "syevd"
                out[routine].append([n, dtype, got[0]])
            else:
                out["getrf"].append([m, n, dtype, got[0]])
    meta = "cusolver_sweep.py on one H200 (torch 2.11.0+cu130): fixtures/run/cusolver_sweep_h200.jsonl.xz"
    print(json.dumps({"source": meta} | out, separators=(",", ":")))


def run():
    out_dir = os.environ.get("OUT", ".")
    torch.manual_seed(0)
    dev = torch.device("cuda")
    for op in ("qr", "eigh", "lu_factor"):
        call(op, torch.randn(64, 64, device=dev))
        call(op, torch.randn(64, 64, device=dev, dtype=torch.float64))
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(
        enabled="all", context=None, stacks="python", max_entries=1_000_000
    )
    start = time.time()
    with open(os.path.join(out_dir, "cusolver_sweep.jsonl"), "w") as out:
        for op, dtype, m, n in cases():
            a = torch.randn(m, n, device=dev, dtype=dtype)
            if op == "eigh":
                a = a + a.mT
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            before = len(torch.cuda.memory._snapshot()["device_traces"][0])
            result = call(op, a)
            torch.cuda.synchronize()
            trace = torch.cuda.memory._snapshot()["device_traces"][0][before:]
            events = [[e["action"], e["size"]] for e in trace if e["action"] in ("alloc", "free_requested")]
            line = {"op": op, "dtype": str(dtype).removeprefix("torch."), "m": m, "n": n, "events": events}
            out.write(json.dumps(line) + "\n")
            out.flush()
            del result, a
    print(f"cusolver_sweep: done in {time.time() - start:.1f} s")


if __name__ == "__main__":
    if sys.argv[1:2] == ["table"]:
        table(sys.argv[2])
    else:
        run()
