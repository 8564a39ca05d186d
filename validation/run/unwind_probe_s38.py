"""What an error frees as it unwinds, one phase per case (session 38's probe): each case makes an op
or a backward pass fail inside `try` and cuts its phase inside the `except` handler, where the
traceback is still alive, so the phase's allocated figure shows what the error left held. A failed
backward (bfloat16 EmbeddingBag(mode="max") has no CUDA backward), a forward op given a temporary,
a custom autograd.Function raising in its backward, an out-of-memory error in a backward under a
memory fraction, and a failed `create_graph=True` pass. `SMOKE=1` shrinks the sizes."""

import os

import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
B = 512 if SMALL else 16384  # rows of the towers' batch
N = 1 << (14 if SMALL else 28)  # 1 GiB of fp32


def phase(name):
    if cuda:
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        print(
            f"{name} allocated {stats['allocated_bytes.all.current']} requested "
            f"{stats['requested_bytes.all.current']} reserved {stats['reserved_bytes.all.current']}"
        )
        torch.cuda.reset_peak_memory_stats()


torch.manual_seed(3801)
towers = []
for _ in range(2):
    bag = torch.nn.EmbeddingBag(50_000, 128, mode="max", device=device).to(torch.bfloat16)
    lin = torch.nn.Linear(128, 256, device=device, dtype=torch.bfloat16)
    towers.append((bag, lin))
ids = torch.randint(0, 50_000, (B, 8), device=device)
phase("setup")


def towers_loss():
    a, b = (F.normalize(lin(bag(ids)), dim=-1) for bag, lin in towers)
    return (a @ b.T).float().logsumexp(1).mean()


# 1. the max EmbeddingBag's backward raises: the gradients the pass carried die with it
loss = towers_loss()
try:
    loss.backward()
except (NotImplementedError, RuntimeError):
    phase("failed_backward_in_handler")
phase("failed_backward_after_handler")
del loss

# 2. a forward op fails on a temporary argument
x = torch.randn(B, 1024, device=device)
w = torch.randn(512, 256, device=device, dtype=torch.half)
try:
    torch.mm(x.half() * 2, w)
except RuntimeError:
    phase("forward_error_in_handler")
del x, w


# 3. a custom Function raising in its own backward (its frame, with the gradient, in the traceback)
class Fragile(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t * 3

    @staticmethod
    def backward(ctx, grad):
        scaled = grad * 3
        raise ValueError(f"no backward for {tuple(scaled.shape)}")


leaf = torch.randn(B, 1024, device=device, requires_grad=True)
out = (Fragile.apply(leaf.exp()) * 2).sum()
try:
    out.backward()
except ValueError:
    phase("custom_backward_in_handler")
phase("custom_backward_after_handler")
del leaf, out

# 4. out of memory inside a backward (4 GiB of new blocks), under a memory fraction that leaves
#    3.5 GiB beyond what stays reserved after empty_cache() (the forward's 3 GiB fit)
if cuda:
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    room = (3.5 if not SMALL else 0.5) * 2**30
    torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + room) / total)
big = torch.randn(N, device=device, requires_grad=True)
loss = (big * 2).sin().sum()
try:
    loss.backward()
except torch.OutOfMemoryError:
    phase("oom_backward_in_handler")
phase("oom_backward_after_handler")
del big, loss
if cuda:
    torch.cuda.set_per_process_memory_fraction(1.0)

# 5. a create_graph=True pass that fails
loss = towers_loss()
params = [p for bag, lin in towers for p in (*lin.parameters(), bag.weight)]
try:
    torch.autograd.grad(loss, params, create_graph=True)
except (NotImplementedError, RuntimeError):
    phase("create_graph_in_handler")
del loss
phase("end_of_cases")
