"""Logs the twin's cuDNN benchmark-mode lookups that `cudnn_benchmark_h200.json.xz` lacks.

With this folder on PYTHONPATH and VRAMSCOPE_CONVLOG=FILE set, every process that imports
`vramscope._kernels.conv` wraps its `_benchmark_entry` (the twin's table lookup, unchanged): each
lookup that finds no measured entry (None, or one `_benchmark_between` estimated) appends one JSON
line to FILE: {"op", "dtype", "x", "w", "stride", "padding", "dilation", "transposed",
"output_padding", "groups", "channels_last", "estimated", "script"}. The answers are the twin's own;
`benchmark_problems.py` turns the lines into `conv_sweep.py run-benchmark`'s PROBLEMS.
"""

import importlib.abc
import json
import os
import sys

_TARGET = "vramscope._kernels.conv"


def _patch(mod):
    inner = mod._benchmark_entry
    path = os.environ["VRAMSCOPE_CONVLOG"]
    script = os.environ.get("VRAMSCOPE_CONVLOG_NAME", "")

    def _benchmark_entry(op, dtype, x, w, stride, padding, dilation, transposed, out_pad, groups, cl):
        entry = inner(op, dtype, x, w, stride, padding, dilation, transposed, out_pad, groups, cl)
        if entry is None or entry.get("estimated"):
            line = {
                "op": op,
                "dtype": dtype,
                "x": list(x.shape),
                "w": list(w.shape),
                "stride": list(stride),
                "padding": list(padding),
                "dilation": list(dilation),
                "transposed": bool(transposed),
                "output_padding": list(out_pad),
                "groups": int(groups),
                "channels_last": bool(cl),
                "estimated": entry is not None,
                "script": script,
            }
            with open(path, "a") as f:
                f.write(json.dumps(line) + "\n")
        return entry

    mod._benchmark_entry = _benchmark_entry


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


if os.environ.get("VRAMSCOPE_CONVLOG"):
    sys.meta_path.insert(0, _Finder())
