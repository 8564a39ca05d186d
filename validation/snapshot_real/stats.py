"""The shape of a snapshot pickle, as one JSON line: sizes, trace entries per
device, actions, streams, frames per entry, how many distinct frames lists
and frame dicts the pickle holds (PyTorch shares them), segments and blocks,
whether the ring buffer wrapped, OOMs. For comparing real snapshots with
gen_snapshot's (issue #36).

    python3 stats.py FILE
"""
import collections
import json
import os
import pickle
import sys

path = sys.argv[1]
snap = pickle.load(open(path, "rb"))
out = {"file": os.path.basename(path), "bytes": os.path.getsize(path), "keys": sorted(snap)}
lists, frames = set(), set()
devs = []
for d, t in enumerate(snap["device_traces"]):
    if not t:
        continue
    acts = collections.Counter(e["action"] for e in t)
    streams = collections.Counter(e["stream"] for e in t)
    nf = [len(e.get("frames", [])) for e in t]
    for e in t:
        fr = e.get("frames")
        if fr is not None and id(fr) not in lists:
            lists.add(id(fr))
            frames.update(id(f) for f in fr)
    allocated = set()
    orphan_frees = 0
    for e in t:
        if e["action"] == "alloc":
            allocated.add(e["addr"])
        elif e["action"] in ("free_requested", "free_completed") and e["addr"] not in allocated:
            orphan_frees += 1
    devs.append({
        "device": d, "entries": len(t), "actions": dict(acts), "streams": len(streams),
        "frames_mean": round(sum(nf) / len(nf), 1), "frames_max": max(nf),
        "first_action": t[0]["action"], "orphan_frees": orphan_frees,
        "time_span_s": round((t[-1]["time_us"] - t[0]["time_us"]) / 1e6, 2),
        "entry_keys": sorted(t[0]),
    })
entries = sum(x["entries"] for x in devs)
segs = snap["segments"]
out.update({
    "devices": devs, "entries": entries, "bytes_per_entry": round(out["bytes"] / max(entries, 1), 1),
    "distinct_frames_lists": len(lists), "distinct_frame_dicts": len(frames),
    "segments": len(segs), "expandable_segments": sum(bool(s.get("is_expandable")) for s in segs),
    "blocks": sum(len(s["blocks"]) for s in segs),
    "segment_streams": len({s["stream"] for s in segs}),
    "reserved": sum(s["total_size"] for s in segs),
    "allocator_settings": {k: v for k, v in snap.get("allocator_settings", {}).items() if k != "roundup_power2_divisions"},
})
print(json.dumps(out), flush=True)
