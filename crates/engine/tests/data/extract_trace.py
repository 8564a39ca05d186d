"""Extract (action, size) per trace entry from the real H100 snapshot of the
`snapshot` seed case, for tests/trace.rs.

    python3 extract_trace.py ../../../../fixtures/seeds/snapshot_encoder_adamw_h100.pickle > snapshot_trace.txt
"""
import pickle
import sys

d = pickle.load(open(sys.argv[1], "rb"))
for e in d["device_traces"][0]:
    print(e["action"], e["size"])
