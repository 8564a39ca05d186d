"""The cuDNN convolution problems a blind set's answers name unmeasured, as `conv_sweep.py run` reads them.

    python3 conv_problems_from_answers.py ANSWERS.jsonl[.xz] OUT.json

Each answer line's `unmeasured` list names a problem as `_kernels/conv.py` writes it: "cuDNN's OP
workspace of [a transposed ]input (N, C, H, W) by weight (K, C/g, R, S) (DTYPE, [channels-last, ]stride
(..), padding (..), [dilation (..), ]groups G)[: estimated ...]". One item per problem and layout (its
ops merged, one item a batch `n`, the scripts' prefixes as `models`). The message does not
carry a transposed convolution's output_padding: it is taken as the one that makes the output twice
the input at stride 2 (`stride - 1` where the spatial sizes halve, as in `_convolution_double_backward`'s
data-gradient convolutions of the torchvision/timm backbones at even sizes), else 0; say so where it
matters."""

import json
import lzma
import re
import sys

PAT = re.compile(
    r"cuDNN's (forward|dgrad|wgrad) workspace of (a transposed )?input \(([-\d, ]+)\) "
    r"by weight \(([-\d, ]+)\) \((\w+), (channels-last, )?stride \(([-\d, ]+)\), "
    r"padding \(([-\d, ]+)\), (?:dilation \(([-\d, ]+)\), )?"
    r"groups (\d+)\)"
)


def ints(s):
    return [int(v) for v in s.replace(" ", "").split(",") if v]


def main():
    src, out = sys.argv[1], sys.argv[2]
    opener = lzma.open if src.endswith(".xz") else open
    items = {}
    with opener(src, "rt") as f:
        for line in f:
            rec = json.loads(line)
            model = rec["script"].split("_")[0]
            for u in rec.get("unmeasured") or []:
                m = PAT.match(u)
                if not m:
                    continue
                op, tr, x, w, dtype, cl, stride, padding, dilation, groups = m.groups()
                x, w, stride, padding = ints(x), ints(w), ints(stride), ints(padding)
                dilation = ints(dilation) if dilation else [1] * len(stride)
                transposed = bool(tr)
                out_pad = [s - 1 if transposed else 0 for s in stride]
                key = (
                    tuple(x[1:]),
                    tuple(w),
                    tuple(stride),
                    tuple(padding),
                    tuple(dilation),
                    transposed,
                    int(groups),
                    x[0],
                    dtype,
                    bool(cl),
                )
                it = items.setdefault(
                    key,
                    {
                        "x": x[1:],
                        "w": w,
                        "stride": stride,
                        "padding": padding,
                        "dilation": dilation,
                        "transposed": transposed,
                        "output_padding": out_pad,
                        "groups": int(groups),
                        "tier": 0,
                        "models": [],
                        "n": x[0],
                        "dtype": dtype,
                        "layout": "nhwc" if cl else "nchw",
                        "ops": [],
                    },
                )
                if model not in it["models"]:
                    it["models"].append(model)
                if op not in it["ops"]:
                    it["ops"].append(op)
    res = sorted(items.values(), key=lambda e: (e["models"], e["dtype"], e["x"], e["w"], e["n"]))
    for e in res:
        e["ops"].sort()
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print(len(res), "problems,", sum(len(e["ops"]) for e in res), "workspaces")


if __name__ == "__main__":
    main()
