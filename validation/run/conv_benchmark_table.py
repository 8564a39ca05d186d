"""The search workspaces of cuDNN's benchmark mode for the twin, from ops_truth.py's GPU records.

    python conv_benchmark_table.py GPU.jsonl [GPU.jsonl ...] > python/vramscope/cudnn_benchmark_h200.json

Each GPU.jsonl is ops_truth.py's record of a script run with `torch.backends.cudnn.benchmark = True`.
A convolution problem's first call there allocates its output, the search's workspace (as large as
the largest plan's: `generate_and_filter_plans` in cudnn/Conv_v8.cpp), frees it, empties the cache and
runs the timed plan with its own workspace; later calls run the plan alone. The search workspace is
the first call's bytes beyond its outputs less the plan's workspace, which the twin's cuDNN table
gives for the heuristics' plan (`Device.conv_workspace`; on blind23/w01's batch-64 problems, whose
later calls show the timed plan's, the two differ by at most 272 bytes). Forward problems only.
"""

import json
import sys

from vramscope._native import Device


def _channels_last(shape, strides):
    """`is_channels_last_strides_2d`'s reading of a 4-D tensor (sizes of 1 taken as they come)."""
    if len(shape) != 4:
        return False
    _, c, h, w = shape
    return list(strides) == [h * w * c, 1, w * c, c]


def main():
    dev = Device("h200")
    problems, seen = [], set()
    for path in sys.argv[1:]:
        for line in open(path):
            r = json.loads(line)
            if r.get("op") != "convolution" or r["args"][6]:
                continue
            x, w, _, stride, padding, dilation, _, out_pad, groups = r["args"]
            # cudnn_conv_suggest_memory_format: channels-last if the input or the weight is
            cl = _channels_last(x[0], x[1]) or _channels_last(w[0], w[1])
            key = (x[2], tuple(x[0]), tuple(w[0]), tuple(stride), tuple(padding), tuple(dilation), groups, cl)
            if key in seen:
                continue
            seen.add(key)
            extra = r["requested"] - sum(r["new"])
            plan = (
                dev.conv_workspace(
                    "forward",
                    x[2],
                    x[0],
                    w[0],
                    stride,
                    padding,
                    dilation,
                    groups,
                    transposed=False,
                    output_padding=out_pad,
                    channels_last=cl,
                )
                or 0
            )
            problems.append(
                {
                    "op": "forward",
                    "dtype": x[2],
                    "input": x[0],
                    "weight": w[0],
                    "stride": stride,
                    "padding": padding,
                    "dilation": dilation,
                    "groups": groups,
                    "channels_last": cl,
                    "search_workspace": extra - plan,
                }
            )
    doc = {
        "about": (
            "cuDNN benchmark mode's search workspace (bytes) by forward convolution problem, measured on an "
            "H200 (sm_90), torch 2.11.0+cu130, cuDNN 9.19: ops_truth.py's first call of each problem, less "
            "its outputs and the heuristics' plan workspace (validation/run/conv_benchmark_table.py over "
            "fixtures/run/truth_blind23_h200.tar.xz's w01)."
        ),
        "problems": problems,
    }
    print("{")
    print(f' "about": {json.dumps(doc["about"])},')
    print(' "problems": [')
    print(",\n".join("  " + json.dumps(p, sort_keys=True) for p in problems))
    print(" ]")
    print("}")


if __name__ == "__main__":
    main()
