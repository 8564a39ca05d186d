#!/usr/bin/env python3
"""Time `vramscope view` over HTTP on one snapshot, as its page asks
(issue #36; for a machine without a browser):

    python3 view_http.py VRAMSCOPE SNAPSHOT [REPS]

Starts `VRAMSCOPE view --no-open SNAPSHOT`; `ready_s` is when it prints its
address (the snapshot read and analysed). Then REPS times the page's
requests in its order, one JSON line each, milliseconds of wall time:
`first_ms` (the page, /api/report, then the whole trace's range and the
state at the peak, fetched together as the page does: its first paint's
data, not its drawing), `zoom16_ms` (a wheel's worth x10: 1/16 of the
trace at the peak), `zoom100_ms` (100 entries at the peak), `pan_ms` (half
a view of those), `mid100_ms`, `at_ms` (a click at the peak), `state_mid_ms`,
`all_ms` (back to the whole trace), `search_ms`. Last line: the server's
peak RSS (VmHWM). `bytes_first` counts the page, the range and the state,
not the report's answer.
"""

import json
import math
import re
import subprocess
import sys
import threading
import time
import urllib.request

W = 1270  # the page's canvas width minus its margins (view.html: 1340 - 60 - 10)


def run_once(url, k):
    """One pass of the page's requests; a dict of what was timed."""

    def get(path):
        with urllib.request.urlopen(url + path, timeout=120) as r:
            return r.read()

    out = {"label": "view run", "run": k}
    t = time.perf_counter()
    page = get("/")
    rep = json.loads(get("/api/report"))
    n, r = max(rep["n"], 1), rep["report"]
    pk = r["peak_trace_index"] if r["peak_trace_index"] is not None else n - 1

    def rng(a, b):
        # view.html's show(a, b)
        a = max(0, min(int(a), n - 1))
        b = min(n, max(math.ceil(b), a + 2))
        return get(f"/api/range?from={a}&to={b}&points={W}")

    got = {}
    th = [
        threading.Thread(target=lambda: got.update(range=rng(0, n))),
        threading.Thread(target=lambda: got.update(state=get(f"/api/state?i={pk}"))),
    ]
    for x in th:
        x.start()
    for x in th:
        x.join()
    out["first_ms"] = round((time.perf_counter() - t) * 1e3, 1)
    out["bytes_first"] = len(page) + len(got["range"]) + len(got["state"])
    out["n"], out["peak"] = n, pk

    def timed(name, f):
        t = time.perf_counter()
        body = f()
        out[name + "_ms"] = round((time.perf_counter() - t) * 1e3, 1)
        out[name + "_bytes"] = len(body)

    a, w = pk - pk / 16, n / 16
    timed("zoom16", lambda: rng(a, a + w))
    timed("zoom100", lambda: rng(pk - 50, pk + 50))
    timed("pan", lambda: rng(pk, pk + 100))
    timed("mid100", lambda: rng(n // 2 - 50, n // 2 + 50))
    timed("at", lambda: get(f"/api/at?i={pk}"))
    timed("state_mid", lambda: get(f"/api/state?i={n // 2}"))
    timed("all", lambda: rng(0, n))
    sites = r.get("live_at_peak", {}).get("sites") or [{"site": "train"}]
    q = sites[0]["site"].split(":")[0].rsplit("/", 1)[-1] or "train"
    out["q"] = q
    timed("search", lambda: get("/api/search?q=" + urllib.request.quote(q)))
    return out


def main():
    vs, snap = sys.argv[1], sys.argv[2]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    t0 = time.perf_counter()
    srv = subprocess.Popen([vs, "view", "--no-open", snap], stderr=subprocess.PIPE, text=True)
    url = None
    for line in srv.stderr:
        m = re.search(r"(http://127\.0\.0\.1:\d+)/?", line)
        if m:
            url = m.group(1)
            break
    ready = time.perf_counter() - t0
    if url is None:
        print(json.dumps({"label": "view", "error": "no address", "rc": srv.wait()}))
        return
    print(json.dumps({"label": "view ready", "ready_s": round(ready, 3)}), flush=True)
    try:
        for k in range(reps):
            print(json.dumps(run_once(url, k + 1)), flush=True)
        with open(f"/proc/{srv.pid}/status") as f:
            hwm = re.search(r"VmHWM:\s+(\d+) kB", f.read())
        print(json.dumps({"label": "view server", "rss_bytes": int(hwm.group(1)) * 1024 if hwm else None}))
    finally:
        srv.kill()
        srv.wait()


if __name__ == "__main__":
    main()
