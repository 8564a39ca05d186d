"""Host-built models: where the CPU tensors, the threads' malloc arenas, the driver's mappings and the
CUDA context lie in the process's address space when the context is made, and where the first
segments go (session 13, issue #31).

    OUT=PREFIX [MAX_SEGS=N] python3 validation/va_host_built.py SCRIPT [ARGS...]

As validation/run/history.py: torch is not imported before the script imports it; right after its
import the memory history is switched on (python frames). torch.cuda._lazy_init is wrapped: before
it, the whole /proc/self/maps, the thread count and every live CPU tensor storage (address, bytes)
are kept ("pre"). From then on a profile function reads the maps after every Python return at which
the reserved memory changed (the first MAX_SEGS changes, default 80): [reserved, threads, added,
removed]. PREFIX.json gets pre, the stops and the memory history's segment actions
[event, action, address, size]. The maps are read into a preallocated buffer.
"""

import gc
import importlib.abc
import importlib.util
import json
import os
import runpy
import signal
import sys

BUF = bytearray(8 << 20)
MAX = int(os.environ.get("MAX_SEGS", "80"))
S = {"torch": None, "pre": None, "stops": [], "prev": None, "res": 0, "n": 0, "post": None}


def read_maps():
    fd = os.open("/proc/self/maps", os.O_RDONLY)
    n = 0
    while True:
        k = os.readv(fd, [memoryview(BUF)[n:]])
        if k == 0:
            break
        n += k
    os.close(fd)
    out = set()
    at = 0
    while at < n:
        e = BUF.find(b"\n", at, n)
        if e < 0:
            e = n
        f = bytes(BUF[at:e]).split(None, 5)
        a, b = f[0].split(b"-")
        out.add((int(a, 16), int(b, 16), f[1].decode(), f[5].decode().split("/")[-1] if len(f) > 5 else ""))
        at = e + 1
    return out


def threads():
    return len(os.listdir("/proc/self/task"))


def prof(frame, event, arg):
    if event != "return":
        return
    torch = S["torch"]
    r = torch.cuda.memory_reserved()
    if r == S["res"]:
        return
    S["res"] = r
    now = read_maps()
    S["stops"].append([r, threads(), sorted(now - S["prev"]), sorted(S["prev"] - now)])
    S["prev"] = now
    S["n"] += 1
    if S["n"] >= MAX:
        sys.setprofile(None)


def wrap(torch):
    orig = torch.cuda._lazy_init

    def lazy_init():
        if S["pre"] is None and not torch.cuda.is_initialized():
            maps = read_maps()
            st = {}
            for o in gc.get_objects():
                if isinstance(o, torch.Tensor):
                    try:
                        if o.device.type == "cpu" and o.layout == torch.strided:
                            s = o.untyped_storage()
                            if s.nbytes():
                                st[s.data_ptr()] = s.nbytes()
                    except Exception:
                        pass
            S["pre"] = {"maps": sorted(maps), "threads": threads(), "storages": sorted(st.items())}
            orig()
            S["prev"] = read_maps()
            S["post"] = {
                "added": sorted(S["prev"] - maps),
                "removed": sorted(maps - S["prev"]),
                "threads": threads(),
            }
            sys.setprofile(prof)
            return
        orig()

    torch.cuda._lazy_init = lazy_init


class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        ex = spec.loader.exec_module

        def exec_and_wrap(module):
            ex(module)
            if module.cuda.is_available():
                module.cuda.memory._record_memory_history(max_entries=2000000, stacks="python")
                S["torch"] = module
                wrap(module)

        spec.loader.exec_module = exec_and_wrap
        return spec


def dump():
    torch = S["torch"]
    sys.setprofile(None)
    segs = []
    if torch is not None and torch.cuda.is_initialized():
        snap = torch.cuda.memory._snapshot()
        ev = 0
        for e in snap["device_traces"][0]:
            if e["action"] in ("segment_alloc", "segment_free", "segment_map", "segment_unmap"):
                segs.append([ev, e["action"], e["addr"], e["size"]])
            else:
                ev += 1
    json.dump(
        {"pre": S["pre"], "post": S["post"], "stops": S["stops"], "segments": segs},
        open(os.environ["OUT"] + ".json", "w"),
    )


def main():
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    sys.meta_path.insert(0, Hook())
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        dump()


if __name__ == "__main__":
    main()
