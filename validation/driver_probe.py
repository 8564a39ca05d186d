"""The device memory the driver takes outside the caching allocator, op by op.

One fresh process per sequence (the driver's share is per process):
    python3 validation/driver_probe.py SEQ   (prints one JSON line)
    for s in $(python3 validation/driver_probe.py --list); do python3 validation/driver_probe.py $s; done
Each step prints total - free - reserved (torch.cuda.mem_get_info, memory_reserved) after it,
in bytes; steps are: conv (a ViT patch embedding, 3->768, kernel 16, stride 16, 224x224),
linear (768->768), each in the sequence's dtype, then backward (through all of them, on the
autograd thread). Only meaningful with this process alone on the GPU.
"""
import json
import sys

SEQS = {
    "conv_fp32": ("float32", ["conv", "linear", "backward"]),
    "conv_bf16": ("bfloat16", ["conv", "linear", "backward"]),
    "conv_fp16": ("float16", ["conv", "linear", "backward"]),
    "linear_fp32": ("float32", ["linear", "conv", "backward"]),
    "linear_bf16": ("bfloat16", ["linear", "conv", "backward"]),
    "convonly_fp32": ("float32", ["conv", "backward"]),
    "convonly_bf16": ("bfloat16", ["conv", "backward"]),
    "linearonly_bf16": ("bfloat16", ["linear", "backward"]),
}


def main():
    if sys.argv[1] == "--list":
        print("\n".join(SEQS))
        return
    name = sys.argv[1]
    dtype_name, steps = SEQS[name]
    import torch
    dtype = getattr(torch, dtype_name)
    torch.cuda.init()
    conv = torch.nn.Conv2d(3, 768, 16, stride=16).cuda().to(dtype)
    lin = torch.nn.Linear(768, 768).cuda().to(dtype)
    torch.cuda.synchronize()

    def outside():
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        return total - free - torch.cuda.memory_reserved()

    out = [("load", outside())]
    x = torch.randn(2, 3, 224, 224, device="cuda", dtype=dtype)
    h = torch.randn(2, 196, 768, device="cuda", dtype=dtype, requires_grad=True)
    y = None
    for s in steps:
        if s == "conv":
            c = conv(x).flatten(2).transpose(1, 2)
            y = c if y is None else y + c
        elif s == "linear":
            t = lin(h if y is None else y)
            y = t
        elif s == "backward":
            y.float().sum().backward()
        out.append((s, outside()))
    print(json.dumps(dict(name=name, dtype=dtype_name, torch=torch.__version__,
                          cudnn=torch.backends.cudnn.version(), steps=out)))


if __name__ == "__main__":
    main()
