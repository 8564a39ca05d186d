"""GPU probe for blind288/kc01 (session 65, helper kc): what autograd's anomaly mode allocates in a backward.
With `check_nan` on, `Engine::evaluate_function` (torch/csrc/autograd/engine.cpp) runs
`isnan(output)._is_any_true().item<bool>()` on every output of every Node after the Node ran and
released its saved variables: a bool mask of the output's size, `any()`'s 0-d result and its reduction
scratch, all freed before the next Node. kc01's checks do not fall at its peaks; here they do: the
gradient of `exp` (a 4096 x 4096 float tensor, 64 MiB) is the last Node's output while the forward's
result is still held, so the mask (16 MiB) adds to the peak. Printed per case: the peak above the
start and what stays allocated, for anomaly mode off, on with NaN checks, on without, and off again;
then the same for a 3-Node chain (exp, then mul by a leaf, then sum). The twin prints the same lines
under `vramscope run` (at 3b4feeb9: 134218752 / 150998016 / 134218752 / 134218752 for the first case, the mask
16 MiB and the reduction 2,048 bytes; 335545344 for each of the chain's).

Run: python3 validation/run/probes/kc01_anomaly_nan_check_probe_s65.py"""

import torch

x = torch.randn(4096, 4096, device="cuda", requires_grad=True)
w = torch.randn(4096, 4096, device="cuda", requires_grad=True)


def case(name, flag, check_nan, fn):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    torch.autograd.set_detect_anomaly(flag, check_nan)
    y = fn()
    y.sum().backward()
    torch.autograd.set_detect_anomaly(False)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    kept = torch.cuda.memory_allocated() - base
    print(f"{name} anomaly {flag} check_nan {check_nan}: peak above start {peak}, kept {kept}")
    x.grad = None
    w.grad = None
    del y


for flag, check in ((False, True), (True, True), (True, False), (False, True)):
    case("exp", flag, check, lambda: x.exp())
for flag, check in ((False, True), (True, True), (True, False)):
    case("exp*w", flag, check, lambda: x.exp() * w)
