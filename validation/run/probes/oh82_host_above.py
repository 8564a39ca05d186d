"""Session 82 (helper oh): where a host-built blind script's lowest CPU tensor lay over the CUDA context's
anchor (L - B, address-space rule 11's draw, docs/driver-placement.md session 44) in a few GPU processes,
and the phase figures each of those processes printed.

    python3 validation/run/probes/oh82_host_above.py SCRIPT        (on a GPU, from validation/run)
    PROBES="oh82_host_above:blind362/na02 oh82_host_above:blind362/na03 oh82_host_above:blind362/na05" \
        bash validation/run/gpu_call.sh

Runs SCRIPT in RUNS (default 3) processes at once through validation/va_host_built.py (MAX_SEGS=4: only
the maps around the context's creation are needed), 80 s at most, each also dumping its whole memory
history to HIST_DIR/history_oh82_<set prefix>_p<k>.pickle (HIST_DIR default: gpu_call.sh's /tmp/res/hist
where it exists, else no history), then prints per process L - B in bytes
(va_host_check.py's reading: B from the context's 5.92 MiB `nvidiactl` mapping at B + 122 MiB, L the low
end of the lowest mapping above B before the context) and the script's own `phaseN ...: max allocated`
lines. To hold against the twin: `VRAMSCOPE_HOST_ABOVE=<L - B bytes> GPU=h100 python
validation/run_answers.py -j 1 OUT.jsonl SCRIPT` and compare OUT.jsonl's phases with that process's lines.
The twin (median 246 MiB) gives blind362/na03 the H100 record's figures at L - B mod 32 MiB of 24 to 0 MiB,
+49,152 bytes in phase 2 onwards at 12 to 22, +901,120 at 2 to 10 (this session's sweep, 230 to 260 MiB
in 2 MiB steps); na02's phase 2 at 3 to 16 (its phase 3 at none: 1 MiB steps). na05 hangs on rule 17's
stacks' phase instead (probes/s74_omp_arena_maps_probe.py reads it): exact at 40 to 52 MiB
(/work/notes/req82/oh.md).
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
from va_host_check import apply, merged  # noqa: E402

MIB = 1 << 20


def l_minus_b(d):
    """va_host_check.py's L - B, in bytes, or a reason."""
    if not d["pre"] or not d["stops"]:
        return "no context"
    pre = {tuple(x) for x in d["pre"]["maps"]}
    post = apply(pre, d["post"]["added"], d["post"]["removed"])
    now = apply(post, d["stops"][0][2], d["stops"][0][3])
    ctl = [x for x in now - pre if x[3] == "nvidiactl" and abs(x[1] - x[0] - 5.92 * MIB) < 0.01 * MIB]
    if not ctl:
        return "no nvidiactl mapping"
    b = ctl[0][0] - 122 * MIB
    lowest = min((x for x in merged(pre) if x[0] > b), key=lambda x: x[0])
    tensors = lowest[1] - lowest[0] >= 20 * MIB and lowest[2] == "rw-p" and not lowest[3]
    what = "" if tensors else f" (not the tensors: {(lowest[1] - lowest[0]) / MIB:.2f} MiB {lowest[2]})"
    mib = (lowest[0] - b) / MIB
    return f"{lowest[0] - b} bytes = {mib:.2f} MiB, mod 32: {mib % 32:.2f}{what}"


def child(script, pickle_path):
    """One process: va_host_built.py's run of SCRIPT, its memory history also dumped whole to
    `pickle_path` (the same process's L - B and history, for block_diff.py --place against the twin
    answered at that L - B)."""
    import va_host_built

    dump = va_host_built.dump

    def dump_both():
        dump()
        torch = va_host_built.S["torch"]
        if pickle_path and torch is not None and torch.cuda.is_initialized():
            torch.cuda.memory._dump_snapshot(pickle_path)

    va_host_built.dump = dump_both
    sys.argv = [va_host_built.__file__, script]
    va_host_built.main()


def main():
    if sys.argv[1] == "--child":
        child(sys.argv[2], os.environ.get("HIST_PICKLE", ""))
        return
    script = os.path.abspath(sys.argv[1])
    runs = int(os.environ.get("RUNS", "3"))
    # histories where gpu_call.sh gathers them (it xz-compresses $R/hist/*.pickle), else none
    hist = os.environ.get("HIST_DIR", "/tmp/res/hist" if os.path.isdir("/tmp/res/hist") else "")
    name = os.path.basename(script).split("_")[0]
    tmp = tempfile.mkdtemp()
    env = dict(os.environ, MAX_SEGS="4", PYTHONUNBUFFERED="1")
    procs = []
    for k in range(runs):
        out = open(os.path.join(tmp, f"p{k}.out"), "w")
        e = dict(env, OUT=os.path.join(tmp, f"p{k}"))
        if hist:
            e["HIST_PICKLE"] = os.path.join(hist, f"history_oh82_{name}_p{k}.pickle")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", script]
        procs.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=e), out))
    for p, out in procs:
        try:
            p.wait(timeout=80)
        except subprocess.TimeoutExpired:
            p.terminate()
            p.wait()
        out.close()
    print(f"script {os.path.basename(script)}")
    for k, (p, _) in enumerate(procs):
        try:
            d = json.load(open(os.path.join(tmp, f"p{k}.json")))
            where = l_minus_b(d)
        except (OSError, ValueError) as err:
            where = f"no maps ({err})"
        print(f"process {k}: rc {p.returncode}, L - B {where}")
        for line in open(os.path.join(tmp, f"p{k}.out")):
            if line.startswith("phase") and "max allocated" in line:
                print("    " + line.rstrip())


if __name__ == "__main__":
    main()
