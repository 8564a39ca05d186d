"""Where a host-built model's CPU tensors lie relative to the CUDA context (session 13, issue #31):
read the archive validation/va_host_built/go.sh writes (fixtures/va_maps/host_built_h200.tar.xz).

    python3 validation/va_host_check.py fixtures/va_maps/host_built_h200.tar.xz

For each run: the anchor B (the context's 5.92 MiB `nvidiactl` mapping lies at B+122 MiB), B modulo
64 MiB, and L - B, L being the low end of the lowest mapping above B before the context (glibc's
mappings of the CPU tensors merge into one anonymous rw-p mapping; L - B is counted only where that
is the lowest, no thread's malloc arena between); then the mappings the context's creation made
between them (offsets from B, MiB), the first segments (offset/size in MiB), and the median of
L - B.
"""

import json
import sys
import tarfile

MIB = 1 << 20


def apply(maps, added, removed):
    out = set(maps)
    out.difference_update(tuple(x) for x in removed)
    out.update(tuple(x) for x in added)
    return out


def merged(maps):
    out = []
    for a, b, p, n in sorted(maps):
        if out and out[-1][1] == a and out[-1][3] == n and (n or out[-1][2] == p):
            out[-1][1] = b
        else:
            out.append([a, b, p, n])
    return out


def main():
    dists = []
    with tarfile.open(sys.argv[1]) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            if not m.name.endswith(".json"):
                continue
            d = json.load(tar.extractfile(m))
            name = m.name.split("/")[-1][:-5]
            if not d["pre"] or not d["stops"]:
                print(f"{name}: no context")
                continue
            pre = {tuple(x) for x in d["pre"]["maps"]}
            post = apply(pre, d["post"]["added"], d["post"]["removed"])
            now = apply(post, d["stops"][0][2], d["stops"][0][3])
            ctl = [x for x in now - pre if x[3] == "nvidiactl" and abs(x[1] - x[0] - 5.92 * MIB) < 0.01 * MIB]
            b = ctl[0][0] - 122 * MIB
            lowest = min((x for x in merged(pre) if x[0] > b), key=lambda x: x[0])
            low = lowest[0]
            tensors = lowest[1] - lowest[0] >= 20 * MIB and lowest[2] == "rw-p" and not lowest[3]
            if tensors:
                dists.append((low - b) / MIB)
            between = [x for x in merged(now - pre) if b + 96 * MIB <= x[0] < low and x[1] - x[0] >= MIB]
            shown = " ".join(
                f"{(a - b) / MIB:+.2f}:{(e - a) / MIB:.2f}{p[:3]}{n[:4]}" for a, e, p, n in between
            )
            segs = " ".join(
                f"{(a - b) // MIB:+d}/{s >> 20}"
                for _, act, a, s in d["segments"][:16]
                if act == "segment_alloc"
            )
            what = (
                "" if tensors else f" (not the tensors: {(lowest[1] - lowest[0]) / MIB:.2f} MiB {lowest[2]})"
            )
            threads = f"threads {d['pre']['threads']}->{d['stops'][0][1]}"
            print(f"{name}: B%64={(b >> 20) % 64} L-B={(low - b) / MIB:.2f}{what} {threads}")
            print(f"    made between: {shown}")
            print(f"    segments: {segs}")
    dists.sort()
    k = len(dists)
    med = dists[k // 2] if k % 2 else (dists[k // 2 - 1] + dists[k // 2]) / 2
    print(f"L-B over {k} runs: " + " ".join(f"{x:.2f}" for x in dists) + f"; median {med:.2f} MiB")


if __name__ == "__main__":
    main()
