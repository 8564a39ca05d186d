"""The cuDNN convolution problems a blind set's answers name unmeasured, as `conv_sweep.py run` reads them.

    python3 conv_problems_from_answers.py ANSWERS.jsonl[.xz] OUT.json

Each answer line's `unmeasured` list names a problem as `_kernels/conv.py` writes it: "cuDNN's OP
workspace of [a transposed ]input (N, C, H, W) by weight (K, C/g, R, S) (DTYPE, [channels-last, ]stride
(..), padding (..), [dilation (..), ]groups G)[: estimated ...]". One item per problem and layout (its
ops merged, one item a batch `n`, the scripts' prefixes as `models`). The message does not
carry a transposed convolution's output_padding: it is taken as the one that makes the output `stride`
times the input (`output_padding`), as in `_convolution_double_backward`'s data-gradient convolutions of
the torchvision/timm backbones at even sizes and in the upsampling ConvTranspose2d of generators and
decoders; say so where it matters."""

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


def output_padding(w, stride, padding, dilation):
    """The output_padding that makes a transposed convolution's output `stride` times its input:
    ConvTranspose's output is (H - 1) s - 2 p + d (k - 1) + 1 + op (torch/nn/modules/conv.py), so
    op = s + 2 p - d (k - 1) - 1 where that is a valid output_padding (below the stride or the
    dilation, ConvolutionUtils), else 0. blind297/kl02's DCGAN generator (k 4, s 2, p 1) has op 0,
    where the earlier `stride - 1` for every transposed problem swept op 1 and left its
    convolutions unmeasured; a 3 x 3 / 1 x 1 stride-2 layer's data gradient keeps op 1."""
    out = []
    for k, s, p, d in zip(w[2:], stride, padding, dilation, strict=True):
        op = s + 2 * p - d * (k - 1) - 1
        out.append(op if 0 <= op < max(s, d) else 0)
    return out


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
                out_pad = output_padding(w, stride, padding, dilation) if transposed else [0] * len(stride)
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
