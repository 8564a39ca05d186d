"""Autocast on threads other than the program's (session 68, helper pb): a bf16 `torch.autocast("cuda")`
region entered on a `threading.Thread` of the program's own, and a `create_graph=True` backward pass (the
autograd engine's device thread, which takes the caller's thread-local state, autocast's included) run
inside an autocast region over an fp32 graph. Each line: the result's dtype, the bytes it keeps and its
peak above what was live before. Autocast's state and the dispatcher's key sets are thread-local; a CUDA
tensor carries the AutocastCUDA key on every thread. Plain python3, a few seconds, < 1 GB."""

import threading

import torch

torch.manual_seed(0)
model = torch.nn.Linear(1024, 1024).cuda()
x = torch.randn(256, 1024, device="cuda")
torch.mm(torch.randn(8, 8, device="cuda"), torch.randn(8, 8, device="cuda"))  # the main thread's workspace


def measure(tag, fn):
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    kept = torch.cuda.memory_allocated() - base
    print(f"{tag}: dtype {out.dtype} kept {kept} peak {torch.cuda.max_memory_allocated() - base}", flush=True)
    return out


def linear_under_autocast():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return model(x)


y = measure("main thread autocast linear", linear_under_autocast)
del y


def on_a_thread():
    torch.mm(torch.randn(8, 8, device="cuda"), torch.randn(8, 8, device="cuda"))  # this thread's workspace
    y = measure("thread autocast linear", linear_under_autocast)
    del y
    print("thread autocast enabled after its region", torch.is_autocast_enabled("cuda"), flush=True)


t = threading.Thread(target=on_a_thread)
t.start()
t.join()

w = torch.randn(1024, 1024, device="cuda", requires_grad=True)
loss = (x @ w).tanh().sum()  # fp32, outside autocast


def grad_inside_autocast():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        (g,) = torch.autograd.grad(loss, w, create_graph=True)
    return g


g = measure("create_graph backward inside autocast", grad_inside_autocast)
del g
print("live at end", torch.cuda.memory_allocated())
