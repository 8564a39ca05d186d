"""The allocator events of a sparse CSR program's ops, from its H200 memory history.

    python csr_events.py HISTORY.pickle OUT.json

HISTORY.pickle: `validation/run/history.py`'s dump of blind89/ck06 (a COO matrix converted with
`to_sparse_csr`, then `A @ v` and `A @ B`) or blind99/cu03 (`A @ X` of a CSR matrix in a training
step, whose backward multiplies by `A.t()`, a CSC matrix). For each op below, the events (`alloc`,
`free_completed`; sizes as requested) that carry its ATen frame, in order, at its first call, and
how many calls allocated the same sizes (ops the history does not run are left out):

- `to_sparse_csr`: `coo_to_sparse_csr` (TensorConversions.cpp);
- `mv`: `at::native::mv` (a CSR matrix by a vector: `addmv_out_sparse_csr`, cuSPARSE SpMV);
- `mm`: `_sparse_csr_mm` (a CSR matrix by a dense matrix: `addmm_out_sparse_compressed_cuda`,
  cuSPARSE SpMM);
- `mm_csc`: `_sparse_csr_mm` of a CSC matrix, whose `to_sparse_csr` flips it first
  (`sparse_compressed_to_flipped`).
"""

import json
import pickle
import sys

FRAMES = {
    "to_sparse_csr": "at::native::coo_to_sparse_csr(",
    "mv": "at::native::mv(",
    "mm": "at::native::_sparse_csr_mm(",
    "mm_csc": "at::native::_sparse_csr_mm(",
}
#: calls of an op that another frame inside them tells apart
INSIDE = {"mm": None, "mm_csc": "at::native::sparse_compressed_to_flipped("}


def calls(trace, frame, inside=None):
    """Each call's events: runs of consecutive allocator events carrying `frame`; with `inside`,
    the runs with an event carrying that frame too (without, for `mm`: those with none)."""
    out, run, flipped, prev_flip = [], [], False, False
    for e in trace:
        if e["action"] not in ("alloc", "free_completed"):
            continue
        names = [f["name"] for f in e.get("frames", [])]
        if any(frame in n for n in names):
            flip = any(INSIDE["mm_csc"] in n for n in names)
            if run and flip and not prev_flip:
                # a CSC product right after another (a backward's layers): a call of its own
                out.append((run, flipped))
                run, flipped = [], False
            run.append([e["action"], e["size"]])
            flipped |= flip
            prev_flip = flip
        elif run:
            out.append((run, flipped))
            run, flipped = [], False
    if run:
        out.append((run, flipped))
    if frame != FRAMES["mm"]:
        return [r for r, _ in out]
    return [r for r, f in out if f == (inside is not None)]


def main():
    with open(sys.argv[1], "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
    ops = {}
    for name, frame in FRAMES.items():
        runs = calls(trace, frame, INSIDE.get(name))
        if runs:
            ops[name] = {"events": runs[0], "calls": len(runs), "same": sum(r == runs[0] for r in runs)}
    with open(sys.argv[2], "w") as f:
        json.dump(ops, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
