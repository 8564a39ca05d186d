"""Make a synthetic complete snapshot look like a real one recorded after
warm-up (issue #36, session 21): the trace's segment actions and its first
5% of entries dropped, so every `alloc` lies in a segment the trace never
made, as in the real recordings of fixtures/snapshot_real (history cleared
after warm-up steps).

    gen_snapshot --entries 300000 --out c50s.pickle   # crates/snapshot/examples
    python realshape.py c50s.pickle r50.pickle        # 41,461,236 bytes, 284,973 entries
"""

import pickle
import sys

src, dst = sys.argv[1], sys.argv[2]
with open(src, "rb") as f:
    s = pickle.load(f)
for i, t in enumerate(s["device_traces"]):
    t = [e for e in t if not e["action"].startswith("segment")]
    s["device_traces"][i] = t[len(t) // 20 :]
with open(dst, "wb") as f:
    pickle.dump(s, f, protocol=4)
print(dst, sum(len(t) for t in s["device_traces"]))
