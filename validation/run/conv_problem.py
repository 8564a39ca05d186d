"""A convolution's problem as `conv_sweep.py extract` and `wild/convlog/sitecustomize.py` write it: plain
lists, ints and bools from `aten.convolution`'s arguments (input and weight sizes, stride, padding,
dilation, transposed, output_padding, groups). Imports nothing: the convlog loads it in every process."""


def fields(x, w, stride, padding, dilation, transposed, output_padding, groups):
    return {
        "x": list(x),
        "w": list(w),
        "stride": list(stride),
        "padding": list(padding),
        "dilation": list(dilation),
        "transposed": bool(transposed),
        "output_padding": list(output_padding),
        "groups": int(groups),
    }
