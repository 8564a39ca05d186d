"""Logs the twin's cuDNN benchmark-mode lookups that `cudnn_benchmark_h200.json.xz` lacks.

With this folder on PYTHONPATH and VRAMSCOPE_CONVLOG=FILE set, every process that imports
`vramscope._kernels.conv` wraps its `_benchmark_entry` (the twin's table lookup, unchanged): each
lookup that finds no measured entry (None, or one `_benchmark_between` estimated) appends one JSON
line to FILE: {"op", "dtype", "x", "w", "stride", "padding", "dilation", "transposed",
"output_padding", "groups", "channels_last", "estimated", "script"}. The answers are the twin's own;
`benchmark_problems.py` turns the lines into `conv_sweep.py run-benchmark`'s PROBLEMS.
"""

import importlib.util
import json
import os
import sys

_TARGET = "vramscope._kernels.conv"
_RUN = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # validation/run


def _load(name):
    """validation/run/NAME.py as the module _convlog_NAME, the folder left off sys.path (the program's
    own imports find what they found before)."""
    spec = importlib.util.spec_from_file_location(f"_convlog_{name}", os.path.join(_RUN, f"{name}.py"))
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
                **_conv_problem.fields(
                    x.shape, w.shape, stride, padding, dilation, transposed, out_pad, groups
                ),
                "channels_last": bool(cl),
                "estimated": entry is not None,
                "script": script,
            }
            with open(path, "a") as f:
                f.write(json.dumps(line) + "\n")
        return entry

    mod._benchmark_entry = _benchmark_entry


if os.environ.get("VRAMSCOPE_CONVLOG"):
    _conv_problem = _load("conv_problem")  # conv_sweep.py extract's fields (conv_sweep imports torch.nn)
    # record.py's hook, staying on sys.meta_path: a find_spec of the module may come before its import
    sys.meta_path.insert(0, _load("record").ImportHook(_TARGET, _patch, stay=True))
