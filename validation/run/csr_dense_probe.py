"""Allocation sequences of `to_sparse_csr` of dense CUDA matrices (`dense_to_sparse_compressed`,
TensorConversions.cpp), one memory history per case: matrices copied from the host with known zeros
(float32, float16, bool-free) and one drawn on the device (every entry nonzero).

    OUT=DIR python3 validation/run/csr_dense_probe.py      (writes DIR/dense_csr.json)

fixtures/run/sparse/dense_csr_h200.json is its output on an H200; python/tests/test_sparse.py
replays each case in the twin and compares the sequences."""

import json
import os

import torch

H = torch.cuda.memory


def host_matrix(rows, cols, every, dtype):
    """A host matrix whose entries are nonzero where (row * cols + col) % every == 0."""
    flat = torch.arange(rows * cols)
    return torch.where(flat % every == 0, flat % 7 + 1, 0).reshape(rows, cols).to(dtype)


CASES = [
    ("host_64x64_every2_f32", lambda: host_matrix(64, 64, 2, torch.float32).cuda()),
    ("host_1000x300_every10_f16", lambda: host_matrix(1000, 300, 10, torch.float16).cuda()),
    ("host_513x257_every3_f64", lambda: host_matrix(513, 257, 3, torch.float64).cuda()),
    ("device_1024x512_f32", lambda: torch.randn(1024, 512, device="cuda")),
]


def main():
    out = {"torch": torch.__version__, "cases": []}
    for name, make in CASES:
        dense = make()
        torch.cuda.synchronize()
        H._record_memory_history(max_entries=100_000)
        before = len(H._snapshot()["device_traces"][0])
        csr = dense.to_sparse_csr()
        torch.cuda.synchronize()
        trace = H._snapshot()["device_traces"][0][before:]
        H._record_memory_history(enabled=None)
        events = [(e["action"], e["size"]) for e in trace if e["action"] in ("alloc", "free_requested")]
        out["cases"].append({"name": name, "nnz": csr.values().numel(), "events": events})
        del csr, dense
        torch.cuda.empty_cache()
    path = os.path.join(os.environ.get("OUT", "."), "dense_csr.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
