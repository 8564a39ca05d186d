"""The allocator events of a sparse CSR program's ops, from its H200 memory history.

    python csr_events.py HISTORY.pickle OUT.json

HISTORY.pickle: `validation/run/history.py`'s dump of blind89/ck06 (a COO matrix converted with
`to_sparse_csr`, then `A @ v` and `A @ B`). For each op below, the events (`alloc`,
`free_completed`; sizes as requested) that carry its ATen frame, in order, at its first call, and
how many calls allocated the same sizes:

- `to_sparse_csr`: `coo_to_sparse_csr` (TensorConversions.cpp);
- `mv`: `at::native::mv` (a CSR matrix by a vector: `addmv_out_sparse_csr`, cuSPARSE SpMV);
- `mm`: `_sparse_csr_mm` (a CSR matrix by a dense matrix: `addmm_out_sparse_compressed_cuda`,
  cuSPARSE SpMM).
"""

import json
import pickle
import sys

FRAMES = {
    "to_sparse_csr": "at::native::coo_to_sparse_csr(",
    "mv": "at::native::mv(",
    "mm": "at::native::_sparse_csr_mm(",
}


def calls(trace, frame):
    """Each call's events: runs of consecutive allocator events carrying `frame`."""
    out, run = [], []
    for e in trace:
        if e["action"] not in ("alloc", "free_completed"):
            continue
        if any(frame in f["name"] for f in e.get("frames", [])):
            run.append([e["action"], e["size"]])
        elif run:
            out.append(run)
            run = []
    if run:
        out.append(run)
    return out


def main():
    with open(sys.argv[1], "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
    ops = {}
    for name, frame in FRAMES.items():
        runs = calls(trace, frame)
        ops[name] = {"events": runs[0], "calls": len(runs), "same": sum(r == runs[0] for r in runs)}
    with open(sys.argv[2], "w") as f:
        json.dump(ops, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
