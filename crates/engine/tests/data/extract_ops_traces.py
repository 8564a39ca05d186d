"""Extract (action, size) per allocator trace entry of the attention op cases
from `fixtures/ops/traces.tar.xz` (the H100 recording of validation/ops_cases.py),
for the trace tests of tests/ops.rs.

    python3 extract_ops_traces.py ../../../../fixtures/ops/traces.tar.xz ops_traces
"""
import json
import os
import sys
import tarfile

CASES = ["mha_w", "mha_now", "mha_fast", "enc_post", "enc_pre", "enc_fast", "enc_fast_pre"]

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
with tarfile.open(src) as tar:
    for name in CASES:
        for dt in ("fp32", "bf16"):
            f = tar.extractfile(f"{name}_{dt}.trace.json")
            trace = json.load(f)
            with open(os.path.join(out, f"{name}_{dt}.txt"), "w") as o:
                for e in trace:
                    o.write(f"{e[0]} {e[2]}\n")
