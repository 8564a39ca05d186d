"""Where the CUDA driver's segments lie among the process's other mappings.

    python3 va_maps.py CASES.json NAME OUTDIR [VAR=VALUE ...]

Runs `hf_cases.py CASES.json NAME OUTDIR` with VA_MAPS=1 (and the environment variables given,
e.g. MALLOC_MMAP_MAX_=0, or VA_MAPS_OPS=1 to stop after every aten op from the inputs to the end
of backward0, or of the first pass of an inference), which stops the child at each checkpoint: after `torch.cuda.init()`, with the
model built on the CPU, after `.cuda()`, at the end of every phase (and after every op with
VA_MAPS_OPS). At each stop this parent reads /proc/PID/maps from outside, so that the child
allocates nothing for it, and lets it go on. Writes OUTDIR/NAME.maps.json:
{name, env, rc, stops: [{label, maps (the whole text, at the stops that are not ops),
added, removed (the mappings that changed since the stop before: [start, end, perms, path])}]}
beside hf_cases.py's NAME.json and NAME.trace.json (the segments' addresses).

Why: under unified addressing a segment's address is an address of the process, and the traces
show segments placed around regions the allocator never mapped (fixtures/va_maps/README.md).
"""
import json
import os
import signal
import subprocess
import sys


def parse(text):
    out = {}
    for line in text.splitlines():
        f = line.split(None, 5)
        a, b = (int(x, 16) for x in f[0].split("-"))
        out[(a, b)] = (f[1], f[5] if len(f) > 5 else "")
    return out


def main():
    cases, name, outdir = sys.argv[1:4]
    extra = dict(kv.split("=", 1) for kv in sys.argv[4:])
    here = os.path.dirname(os.path.abspath(__file__))
    r, w = os.pipe()
    env = dict(os.environ, **extra, VA_MAPS="1", VA_MAPS_FD=str(w))
    p = subprocess.Popen([sys.executable, os.path.join(here, "hf_cases.py"), cases, name, outdir],
                         env=env, pass_fds=(w,))
    os.close(w)
    os.set_blocking(r, False)
    pending = b""
    stops, prev = [], {}

    def read_labels():
        nonlocal pending
        try:
            pending += os.read(r, 1 << 20)
        except BlockingIOError:
            pass

    try:
        while True:
            _, status = os.waitpid(p.pid, os.WUNTRACED)
            if not os.WIFSTOPPED(status):
                rc = os.waitstatus_to_exitcode(status)
                break
            with open(f"/proc/{p.pid}/maps") as f:
                text = f.read()
            read_labels()
            label, _, pending = pending.partition(b"\n")
            label = label.decode()
            cur = parse(text)
            stop = dict(label=label,
                        added=[[a, b, *cur[(a, b)]] for a, b in sorted(set(cur) - set(prev))],
                        removed=[[a, b, *prev[(a, b)]] for a, b in sorted(set(prev) - set(cur))])
            if not label.startswith("aten."):
                stop["maps"] = text
            stops.append(stop)
            prev = cur
            os.kill(p.pid, signal.SIGCONT)
    finally:
        if p.poll() is None:  # this parent failed: do not leave the child stopped on the GPU
            p.kill()
    read_labels()
    if pending:  # a label with no stop of its own: the stops and labels went out of step
        sys.exit(f"{name}: labels left without a stop: {pending.decode()[:200]}")
    with open(os.path.join(outdir, f"{name}.maps.json"), "w") as f:
        json.dump(dict(name=name, env=extra, rc=rc, stops=stops), f)
    sys.exit(rc if rc >= 0 else 128 - rc)


if __name__ == "__main__":
    main()
