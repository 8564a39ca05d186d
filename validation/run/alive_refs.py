"""Run a script (runpy, as record.py does), then list the CUDA tensors still alive that neither its
globals, its modules' parameters and buffers, nor its optimizers' states hold, with referrer chains."""
import gc, runpy, sys, types
import torch
path = sys.argv[1]
g = runpy.run_path(path, run_name="__main__")
held = set()
for v in g.values():
    if isinstance(v, torch.Tensor):
        held.add(id(v))
    if isinstance(v, torch.nn.Module):
        held.update(id(t) for t in v.parameters()); held.update(id(t) for t in v.buffers())
        held.update(id(t.grad) for t in v.parameters() if t.grad is not None)
    if isinstance(v, torch.optim.Optimizer):
        for st in v.state.values():
            held.update(id(t) for t in st.values() if isinstance(t, torch.Tensor))
gc.collect()
alive = [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.is_cuda and id(o) not in held
         and not isinstance(o, torch.nn.Parameter)]
alive.sort(key=lambda t: -t.untyped_storage().nbytes())
print("alive CUDA tensors not held:", len(alive), "allocated", torch.cuda.memory_allocated())
def desc(o):
    if isinstance(o, types.FrameType):
        return f"frame {o.f_code.co_filename.split('/')[-1]}:{o.f_lineno} {o.f_code.co_name}"
    if isinstance(o, types.TracebackType):
        return f"traceback line {o.tb_lineno}"
    if isinstance(o, dict):
        return f"dict(len={len(o)}, keys={[str(k)[:30] for k in list(o)[:6]]})"
    if isinstance(o, (list, tuple)):
        return f"{type(o).__name__}(len={len(o)})"
    return type(o).__module__ + "." + type(o).__qualname__
ignore = {id(alive)}
for t in alive[:6]:
    print("TENSOR", tuple(t.shape), t.dtype, t.untyped_storage().nbytes())
    frontier = [(t, 0)]
    seen = {id(t)}
    n = 0
    while frontier and n < 40:
        o, d = frontier.pop(0)
        if d >= 8:
            continue
        for r in gc.get_referrers(o):
            if id(r) in seen or id(r) in ignore or r is frontier or isinstance(r, types.FrameType) and r.f_code.co_filename == __file__:
                continue
            seen.add(id(r)); n += 1
            print("  " * (d + 1) + desc(r))
            frontier.append((r, d + 1))
