"""GPU probe: torch.export of a forward that copies to the host (session 60, helper ms; not run yet).

Run: python validation/run/probes/ms60_export_cpu.py   (the twin: vramscope run --gpu h200 ...)

The forward `y = (x * 2).cpu(); return y + 1, x.to("cpu", torch.float16), x + 1` exported strict and
non-strict, then `run_decompositions()`. Expected on the GPU (PyTorch 2.11's source):
- the exported graph keeps both copies as `aten.to` nodes naming the host (the Python binding's
  `dispatch_to`, python_variable_methods.cpp: `cpu()` and `to(device=)` -> `to.dtype_layout`,
  `to(device, dtype)` -> `to.device`; export preserves `aten.to` and guards it with
  `_assert_tensor_metadata(device=cuda:0)`, torch/_export/utils.py), and `y + 1` reads the copy while
  `x + 1` reads `x` (on CUDA `to` makes a new tensor; only a no-op `to` returns `self`):
    to.dtype_layout mul device=cpu
    to.device x device=cpu
- run_decompositions: the composite `to` becomes `_to_copy(..., device=cpu)`:
    _to_copy mul device=cpu
    _to_copy x device=cpu
- `ep.module()(x)` and the decomposed module return cpu, cpu, cuda; the CUDA memory they leave is
  `x + 1`'s, 262144 bytes; the peak over the start is one 262144-byte temporary at a time (`mul`
  dies after its copy, FX's codegen frees a value after its last use), so
    strict=False exported: devices ['cpu', 'cpu', 'cuda'] kept 262144 peak 262144
  and the same for the decomposed module and for strict=True.
Before session 60 the twin printed `to.dtype_layout mul device=cuda:0` (the host trace's `to` found
the fake tensor on its target device and returned it, then the relabel made the node cuda), the
decomposed graph no copy to the host, and the modules returned cuda tensors (655360 bytes kept)."""

import torch


class M(torch.nn.Module):
    def forward(self, x):
        y = (x * 2).cpu()
        return y + 1, x.to("cpu", torch.float16), x + 1


def copies(ep):
    for n in ep.graph.nodes:
        if n.op != "call_function":
            continue
        devices = [a for a in (*n.args, *n.kwargs.values()) if isinstance(a, torch.device)]
        if torch.device("cpu") in devices and n.target is not torch.ops.aten._assert_tensor_metadata.default:
            print(
                "   ", str(n.target).removeprefix("aten.").removesuffix(".default"), n.args[0], "device=cpu"
            )


def run(label, ep, x):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    ys = ep.module()(x)
    torch.cuda.synchronize()
    kept = torch.cuda.memory_allocated() - base
    peak = torch.cuda.max_memory_allocated() - base
    print(f"  {label}: devices {[y.device.type for y in ys]} kept {kept} peak {peak}")


x = torch.randn(256, 256, device="cuda")
for strict in (False, True):
    print(f"strict={strict}")
    ep = torch.export.export(M(), (x,), strict=strict)
    copies(ep)
    run("exported", ep, x)
    dec = ep.run_decompositions()
    copies(dec)
    run("decomposed", dec, x)
