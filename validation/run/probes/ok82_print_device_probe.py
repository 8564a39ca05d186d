"""Follow-up of oe81_api_corners_probe (session 82, helper ok): what printing CUDA tensors allocates
for the dtypes and values the twin takes another branch for, the full text of the CUDA errors of
a device index past the device count (and of a device-side assert, last: it poisons the context),
and what a CUDA storage's bytes read. One line per check, `name: answer`; run under plain `python`
on a one-GPU machine (a few seconds), and under `vramscope run --gpu h100` for the twin's lines.
  print NAME: (len(repr), allocations, peak bytes above the start, reserved change)
  err NAME: the exception's type and its whole message (repr)
"""

import torch

dev = "cuda"


def say(name, f):
    try:
        print(f"{name}: {f()!r}")
    except Exception as e:  # (the type and message are the answer)
        print(f"{name}: raised {type(e).__name__}: {str(e)!r}")


def stats():
    s = torch.cuda.memory_stats()
    return (s["allocation.all.allocated"], s["allocated_bytes.all.peak"], torch.cuda.memory_reserved())


def printed(t):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = stats()
    text = repr(t)
    after = stats()
    return (len(text), after[0] - before[0], after[1] - before[1], after[2] - before[2])


torch.manual_seed(0)
torch.zeros(1, device=dev)
cases = {
    "zeros large fp32": lambda: torch.zeros(4096, 4096, device=dev),
    "ones large fp32": lambda: torch.ones(4096, 4096, device=dev),
    "arange large fp32": lambda: torch.arange(4096 * 4096, device=dev, dtype=torch.float32).view(4096, 4096),
    "randn 100x100 fp32": lambda: torch.randn(100, 100, device=dev),
    "randn 4x4 fp16": lambda: torch.randn(4, 4, device=dev, dtype=torch.float16),
    "randn 4x4 fp64": lambda: torch.randn(4, 4, device=dev, dtype=torch.float64),
    "arange 10 fp32": lambda: torch.arange(10.0, device=dev),
    "1e-6 and 1 fp32": lambda: torch.tensor([1e-6, 1.0, 2.0], device=dev),
    "nan inf fp32": lambda: torch.tensor([float("nan"), float("inf"), 1.5], device=dev),
    "zeros 4x4 fp32": lambda: torch.zeros(4, 4, device=dev),
    "bool 4x4": lambda: torch.rand(4, 4, device=dev) > 0.5,
    "complex64 4x4": lambda: torch.randn(4, 4, device=dev, dtype=torch.complex64),
    "int64 large 2-d": lambda: torch.randint(0, 10, (4096, 4096), device=dev),
    "param 3x3": lambda: torch.nn.Parameter(torch.randn(3, 3, device=dev)),
    "grad_fn 3": lambda: torch.randn(3, device=dev, requires_grad=True) * 2,
}
for name, make in cases.items():
    t = make()
    say(f"print {name}", lambda t=t: printed(t))
    del t


class Formatted:
    """`f"{t}"` / `f"{t:.2f}"` through `printed` (Tensor.__format__ of a 0-d tensor: `.item()`)."""

    def __init__(self, t, spec):
        self.t, self.spec = t, spec

    def __repr__(self):
        return format(self.t, self.spec)


s0 = torch.randn((), device=dev)
say("print f-string 0-d", lambda: printed(Formatted(s0, "")))
say("print f-string 0-d .2f", lambda: printed(Formatted(s0, ".2f")))
say("print f-string 1-d", lambda: printed(Formatted(torch.randn(3, device=dev), "")))

x = torch.arange(6.0, device=dev)
st = x.untyped_storage()
say("storage bytes", lambda: [st[i] for i in range(8)])
say("storage str len", lambda: len(str(st)))
say("typed storage item", lambda: x.storage()[1])
say("typed storage device", lambda: (str(x.storage().device), x.storage().is_cuda))

say("device_count", torch.cuda.device_count)
for name, f in (
    ("empty cuda:1", lambda: torch.empty(3, device="cuda:1")),
    ("zeros device=1", lambda: torch.zeros(3, device=1)),
    ("to cuda:1", lambda: x.to("cuda:1")),
    ("cuda(1)", lambda: x.cuda(1)),
    ("set_device 1", lambda: torch.cuda.set_device(1)),
    ("device(1) enter", lambda: torch.cuda.device(1).__enter__()),
    ("get_device_name 1", lambda: torch.cuda.get_device_name(1)),
    ("memory_allocated 1", lambda: torch.cuda.memory_allocated(1)),
    ("mem_get_info 1", lambda: torch.cuda.mem_get_info(1)),
    ("Stream device 1", lambda: torch.cuda.Stream(device=1)),
):
    say(f"err {name}", f)
say("after errors", lambda: (torch.cuda.current_device(), torch.empty(2, device=dev).device.index))


def device_assert():
    y = torch.arange(3, device=dev)[torch.tensor([5], device=dev)]
    torch.cuda.synchronize()
    return y


say("err device assert", device_assert)
