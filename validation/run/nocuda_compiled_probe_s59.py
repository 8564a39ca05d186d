"""Ops with no CUDA kernel inside compiled code (session 59's probe; written for a GPU run, never run
on one yet). Each case prints what it raised (type and first line) and cuts its phase inside the
`except` handler, where the traceback is alive, then once after it:

1. eager `torch.histogram` of a 64 MiB tensor (the dispatcher's NotImplementedError);
2. the same compiled (Inductor, fullgraph=False): dynamo's fake run takes FakeTensor's unsafe
   fallback (`run_fallback_kernel`), which makes CUDA zeros of each input (64 MiB) before the op
   raises, then the node breaks the graph and the op runs eagerly and raises;
3. the same with fullgraph=True (`torch._dynamo.exc.Unsupported` at compile time);
4. `aten._add_relu` compiled (Inductor): a meta kernel, no CUDA kernel, no lowering: the implicit
   fallback raises when the compiled graph runs, after the fused `t * 2` buffer was allocated;
5. the same under backend="aot_eager";
6. `torch.export.export` (non-strict) of a module calling `torch.histogram`.

The twin's answer:
`GPU=h200 python validation/run_answers.py OUT validation/run/nocuda_compiled_probe_s59.py`.
`SMOKE=1` shrinks the sizes."""

import os

import torch
import torch._dynamo

SMALL = bool(os.environ.get("SMOKE"))
N = 1 << (12 if SMALL else 24)  # 64 MiB of fp32


def phase(name):
    stats = torch.cuda.memory_stats()
    print(
        f"{name} allocated {stats['allocated_bytes.all.current']} requested "
        f"{stats['requested_bytes.all.current']} reserved {stats['reserved_bytes.all.current']} "
        f"peak {stats['allocated_bytes.all.peak']}"
    )
    torch.cuda.reset_peak_memory_stats()


def said(case, e):
    print(case, type(e).__module__, type(e).__name__, str(e).split("\n")[0][:160])


x = torch.randn(N, device="cuda")
phase("setup")


def hist(t):
    return torch.histogram(t * 2, bins=10)


def add_relu(t):
    return torch.ops.aten._add_relu(t * 2, t)


cases = [
    ("eager_histogram", lambda: hist(x)),
    ("compiled_histogram", lambda: torch.compile(hist)(x)),
    ("compiled_histogram_fullgraph", lambda: torch.compile(hist, fullgraph=True)(x)),
    ("compiled_add_relu", lambda: torch.compile(add_relu)(x)),
    ("aot_eager_add_relu", lambda: torch.compile(add_relu, backend="aot_eager")(x)),
]
for case, run in cases:
    torch._dynamo.reset()
    try:
        run()
        print(case, "ran")
    except Exception as e:
        said(case, e)
        phase(f"{case}_in_handler")
    phase(f"{case}_after_handler")


class M(torch.nn.Module):
    def forward(self, t):
        return torch.histogram(t * 2, bins=10)[0]


try:
    torch.export.export(M(), (x,))
    print("export_histogram ran")
except Exception as e:
    said("export_histogram", e)
    phase("export_histogram_in_handler")
phase("export_histogram_after_handler")
