"""The device memory the driver takes outside the caching allocator, op by op.

One fresh process per sequence (the driver's share is per process):
    python3 validation/driver_probe.py SEQ   (prints one JSON line)
    for s in $(python3 validation/driver_probe.py --list); do python3 validation/driver_probe.py $s; done
Each step prints total - free - reserved (torch.cuda.mem_get_info, memory_reserved) after it,
in bytes, from `setup` on (the layers cast to the dtype, the inputs made); steps are: conv (a
ViT patch embedding, 3->768, kernel 16, stride 16, 224x224), linear (768->768), each on its own
input in the sequence's dtype, then backward (of the sum of their outputs in fp32, on the
autograd thread: its cast and reduction kernels count there). Only meaningful with this
process alone on the GPU.
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

    x = torch.randn(2, 3, 224, 224, device="cuda", dtype=dtype)
    h = torch.randn(2, 196, 768, device="cuda", dtype=dtype, requires_grad=True)
    out = [("setup", outside())]
    outs = []
    for s in steps:
        if s == "conv":
            outs.append(conv(x))
        elif s == "linear":
            outs.append(lin(h))
        elif s == "backward":
            sum(o.float().sum() for o in outs).backward()
        out.append((s, outside()))
    print(json.dumps(dict(name=name, dtype=dtype_name, torch=torch.__version__,
                          cudnn=torch.backends.cudnn.version(), steps=out)))


if __name__ == "__main__":
    main()
