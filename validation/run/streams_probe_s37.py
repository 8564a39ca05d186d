"""The autograd engine's streams, one phase per case (session 37's probe): where a backward Node's
allocations go (the stream its forward op ran on, torch/csrc/autograd/engine.cpp) and which gradients
are recorded on another stream (input_buffer.cpp's `InputBuffer::add`). Each case first leaves a
256 MiB block cached on the default stream, so a backward allocating there reuses it and one
allocating on a side stream cuts new segments (reserved shows which). `SMOKE=1` shrinks the sizes."""

import os

import torch

SMALL = bool(os.environ.get("SMOKE"))
device = "cuda" if torch.cuda.is_available() else "cpu"
N = 1 << (12 if SMALL else 22)  # 16 MiB of fp32
cuda = device == "cuda"


def stream():
    return torch.cuda.Stream() if cuda else None


def on(s):
    return (
        torch.cuda.stream(s) if cuda else torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    )


def phase(name):
    if cuda:
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        print(
            f"{name} allocated {stats['allocated_bytes.all.current']} requested "
            f"{stats['requested_bytes.all.current']} reserved {stats['reserved_bytes.all.current']}"
        )
        torch.cuda.reset_peak_memory_stats()


def cache_on_default():
    torch.empty(16 * N, device=device)  # 256 MiB, freed at once: cached on the default stream


torch.manual_seed(3701)
w = torch.randn(N, device=device, requires_grad=True)
phase("setup")

# 1. w's AccumulateGrad made on stream a (kept by `keep`), its two producers on stream b: the second
#    gradient, added in place into the first, is freed with a use on a (held until the next malloc)
cache_on_default()
a, b = stream(), stream()
with on(a):
    keep = w * 1
with on(b):
    out = (w * 2 + w * 3).sum()
    (g,) = torch.autograd.grad(out, w)
phase("accumulate_across_streams")
del keep, g, out
torch.empty(1, device=device)
phase("after_next_malloc")

# 2. forward on a side stream, backward called on the default stream
cache_on_default()
s = stream()
with on(s):
    h = (w * 2).exp()
    loss = (h * h).sum()
loss.backward()
phase("forward_side_backward_default")
del h, loss
w.grad = None

# 3. forward on the default stream, backward called inside a side stream
cache_on_default()
h = (w * 2).exp()
loss = (h * h).sum()
with on(s):
    loss.backward()
phase("forward_default_backward_side")
del h, loss
w.grad = None

# 4. w's AccumulateGrad made on stream a (kept), its two producers on the default stream
cache_on_default()
with on(a):
    keep = w * 1
out = (w * 2 + w * 3).sum()
(g,) = torch.autograd.grad(out, w)
phase("accumulate_default_into_side")
del keep, g, out
torch.empty(1, device=device)
phase("end")
