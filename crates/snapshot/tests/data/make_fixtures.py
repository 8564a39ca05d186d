#!/usr/bin/env python3
"""Regenerate the small pickle fixtures used by tests/handmade.rs.

Run from this directory with any Python 3.8+: `python3 make_fixtures.py`.
Only the standard library is used; nothing here needs torch.
"""
import collections
import pickle

BIG = 2**64 - 1          # fits u64, not i64
HUGE = 2**64 + 5         # fits neither (LONG1 with 9 bytes)

frame_py = {"name": "forward", "filename": "/site-packages/torch/nn/modules/linear.py", "line": 125}
frame_cpp = {"name": "at::native::empty_cuda(...)", "filename": "??", "line": 0}
stack = [frame_cpp, frame_py]  # innermost first, shared by reference below


def snapshot():
    return {
        "segments": [
            {
                "device": 0,
                "address": 139_000_000_000_000,
                "total_size": 2097152,
                "allocated_size": 512,
                "active_size": 1024,
                "requested_size": 500,
                "stream": BIG,  # a stream handle wider than i64
                "segment_type": "small",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": stack,
                "blocks": [
                    {"address": 139_000_000_000_000, "size": 512, "requested_size": 500,
                     "state": "active_allocated", "frames": stack},
                    {"address": 139_000_000_000_512, "size": 512, "requested_size": 512,
                     "state": "active_awaiting_free", "frames": []},
                    {"address": 139_000_000_001_024, "size": 2096128, "requested_size": 0,
                     "state": "inactive", "frames": []},
                ],
            }
        ],
        "device_traces": [[
            {"action": "segment_alloc", "addr": 139_000_000_000_000, "size": 2097152, "stream": 0,
             "time_us": 1_700_000_000_000_000, "frames": stack},
            {"action": "alloc", "addr": 139_000_000_000_000, "size": 512, "stream": 0,
             "time_us": 1_700_000_000_000_001, "frames": stack, "compile_context": "N/A", "user_metadata": ""},
            {"action": "oom", "device_free": 123456, "size": 1 << 40, "stream": 0,
             "time_us": 1_700_000_000_000_002, "frames": []},
        ]],
        "allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            "max_split_size": 1 << 30,
            "garbage_collection_threshold": 0.6,
            "expandable_segments": True,
            "roundup_power2_divisions": {"1": 4, "2": 4, "4": 8},
            "some_future_knob": [1, 2, 3],
        },
        "external_annotations": [
            {"stage": "START", "name": "step", "device": 0, "time_us": 1_700_000_000_000_003},
        ],
    }


def legacy():
    """PyTorch 1.13 style: a bare list of segments; blocks carry `history`."""
    return [
        {
            "address": 140_000_000_000_000,
            "total_size": 20971520,
            "allocated_size": 1024,
            "active_size": 2048,
            "stream": 0,
            "segment_type": "large",
            "blocks": [
                {"size": 1024, "state": "active_allocated",
                 "history": [{"addr": 140_000_000_000_000, "real_size": 1000, "frames": stack}]},
                {"size": 1024, "state": "active_awaiting_free", "history": []},
                {"size": 20969472, "state": "inactive"},
            ],
        }
    ]


def values():
    shared = [1, 2]
    return {
        "ints": [0, 1, -1, 255, 256, 65535, 65536, -(2**31), 2**31, 2**62, -(2**63), 2**63, BIG, HUGE, -HUGE],
        "floats": [0.0, -1.5, 1e300, float("inf")],
        "text": ["", "ascii", "caf\u00e9 \u2603 \U0001f600", "x" * 300],
        "bytes": [b"", b"\x00\xff", bytearray(b"ba")],
        "tuple": (1, (2, 3), ()),
        "set": {1, 2, 3},
        "frozenset": frozenset({"a"}),
        "shared": [shared, shared],
        "dict": {1: "one", (1, 2): "pair", None: "none", 2.5: "float"},
        "ordered": collections.OrderedDict([("b", 1), ("a", 2)]),
        "flags": [True, False, None],
    }


def unknown_line():
    """A frame whose line PyTorch did not know: 2**64-1 (`uint64_t` -1),
    as torch 2.11 writes `init_gpu_context` (fixtures/snapshot_real)."""
    unknown = {"name": "init_gpu_context", "filename": "/torch/_subclasses/fake_tensor.py", "line": BIG}
    stack_u = [frame_cpp, unknown, frame_py]
    entry = lambda action, addr, size, t, frames: {
        "action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": frames,
        "compile_context": "N/A", "user_metadata": ""}
    base = 139_000_000_000_000
    return {
        "segments": [
            {"device": 0, "address": base, "total_size": 2097152, "allocated_size": 512,
             "active_size": 512, "requested_size": 512, "stream": 0, "segment_type": "small",
             "segment_pool_id": (0, 0), "is_expandable": False, "frames": stack_u,
             "blocks": [
                 {"address": base, "size": 512, "requested_size": 512, "state": "active_allocated",
                  "frames": stack_u},
                 {"address": base + 512, "size": 2096640, "requested_size": 0, "state": "inactive",
                  "frames": []},
             ]},
        ],
        "device_traces": [[
            entry("segment_alloc", base, 2097152, 1_700_000_000_000_000, stack_u),
            entry("alloc", base, 512, 1_700_000_000_000_001, stack_u),
            entry("alloc", base + 512, 512, 1_700_000_000_000_002, [frame_cpp, dict(unknown), frame_py]),
            entry("free_requested", base + 512, 512, 1_700_000_000_000_003, stack),
            entry("free_completed", base + 512, 512, 1_700_000_000_000_004, stack),
        ]],
    }


def write(name, obj, proto):
    with open(name, "wb") as f:
        pickle.dump(obj, f, protocol=proto)


for p in range(0, 6):
    write(f"snapshot_p{p}.pickle", snapshot(), p)
    write(f"values_p{p}.pickle", values(), p)
for p in (0, 2, 4):
    write(f"unknown_line_p{p}.pickle", unknown_line(), p)
write("legacy_list_p2.pickle", legacy(), 2)
write("ordered_p2.pickle", collections.OrderedDict(snapshot()), 2)
write("not_snapshot_int.pickle", 42, 4)
write("not_snapshot_dict.pickle", {"foo": 1, "bar": [1, 2]}, 4)

# Malicious pickles: they must be refused without running anything.
with open("evil_global_p0.pickle", "wb") as f:
    f.write(b"cos\nsystem\n(S'echo pwned'\ntR.")
with open("evil_stack_global_p4.pickle", "wb") as f:
    f.write(b"\x80\x04\x8c\x08builtins\x94\x8c\x04eval\x94\x93\x94\x8c\x031+1\x94\x85\x94R\x94.")
print("ok")
