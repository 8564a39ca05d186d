"""/proc/self/maps around a process's first cuDNN convolution (fp32, NCHW, 64x64x32x32 by 64x64x3x3): the mappings it adds
and removes, as JSON on stdout. On a GPU: `python3 validation/va_first_conv.py > fixtures/va_maps/first_conv_h200.json`."""
import json, os, re, sys
import torch

def maps():
    out = set()
    for line in open("/proc/self/maps"):
        parts = line.split()
        a, b = (int(x, 16) for x in parts[0].split("-"))
        out.add((a, b, parts[1], parts[5] if len(parts) > 5 else ""))
    return out

x = torch.randn(64, 64, 32, 32, device="cuda")
w = torch.randn(64, 64, 3, 3, device="cuda")
torch.cuda.synchronize()
m0 = maps()
y = torch.nn.functional.conv2d(x, w, padding=1)
torch.cuda.synchronize()
m1 = maps()
first_seg = min(s["address"] for s in torch.cuda.memory._snapshot()["segments"])
new = sorted(m1 - m0)
gone = sorted(m0 - m1)
print(json.dumps({"first_segment": first_seg,
                  "new": [(hex(a), (b - a), p, n.split("/")[-1]) for a, b, p, n in new],
                  "gone": [(hex(a), (b - a), p, n.split("/")[-1]) for a, b, p, n in gone]}, indent=0))
