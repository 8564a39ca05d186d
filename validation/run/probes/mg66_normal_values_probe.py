"""CUDA normal draws' values (session 66, helper mg): `randn` / `normal_` through curand's Box-Muller
(`curand_normal4` for float, half and bfloat16, `curand_normal2_double` for float64), which the twin now
computes on the host. Plain `python3` on the GPU and `vramscope run` print the same lines where the twin
is right (values to 5 decimals: the device's `__sincosf` is approximated; counts exactly).

    python3 probes/mg66_normal_values_probe.py"""

import torch

dev = "cuda"


def show(name, t):
    flat = t.detach().flatten().double()
    print(name, " ".join(f"{v:.5f}" for v in flat[:6].tolist()), flush=True)


torch.manual_seed(0)
show("randn_f32_seed0", torch.randn(5, device=dev))
torch.manual_seed(1234)
show("randn_f16", torch.randn(6, device=dev, dtype=torch.half))
show("randn_bf16", torch.randn(6, device=dev, dtype=torch.bfloat16))
show("randn_f64", torch.randn(6, device=dev, dtype=torch.float64))
show("normal_2_3", torch.normal(2.0, 3.0, size=(6,), device=dev))
show("randn_like", torch.randn_like(torch.empty(3, 2, device=dev)))
_ = torch.randn(100000, device=dev)
show("randn_after_large", torch.randn(6, device=dev))
x = torch.randn(60000, device=dev)
print("randn_60000 above_1", int((x > 1.0).sum()), "below_-2", int((x < -2.0).sum()), flush=True)
print("randn_60000 tail", " ".join(f"{v:.5f}" for v in x[-4:].double().tolist()), flush=True)
d = torch.randn(30000, device=dev, dtype=torch.float64)
print("randn_f64_30000 above_1", int((d > 1.0).sum()), flush=True)
