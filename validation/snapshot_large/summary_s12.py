"""Fastest wall (range) and largest RSS per label of a bench_s12.sh log;
phase medians of the hooks lines."""
import json, sys, collections, statistics
runs = collections.defaultdict(list); pts = collections.defaultdict(list); other = []
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        other.append(line.rstrip()); continue
    if "pt" in r:
        pts[(r["file"], r["bin"], r["pt"])].append(r["ms"])
    elif "wall_s" in r:
        runs[r["label"]].append((r["wall_s"], r["rss_bytes"], r["rc"]))
    else:
        other.append(line.rstrip())
for o in other:
    print(o)
for k, v in runs.items():
    w = sorted(x[0] for x in v)
    print(f"{k}: fastest {w[0]:.3f} s ({w[0]:.3f}-{w[-1]:.3f}), rss {max(x[1] for x in v)/1e6:.1f} MB, rc {set(x[2] for x in v)}")
for k, v in pts.items():
    print(f"{k[0]} {k[1]} {k[2]}: {min(v):.1f}-{max(v):.1f}")
