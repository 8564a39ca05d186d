#!/usr/bin/env python3
"""Time `vramscope view`'s page in headless Chromium, by the page's own clock.

    python3 benches/view_browser.py VRAMSCOPE SNAPSHOT [RUNS] [QUERY]

(`benches/view_speed.sh` makes a 10 M-entry snapshot and runs this.)
Starts `VRAMSCOPE view --no-open SNAPSHOT`, waits for its address, then
RUNS times (3 by default) opens the page in a fresh headless Chromium
driven over the DevTools protocol (`--remote-debugging-pipe`, no virtual
time) and prints one JSON line a run, milliseconds by `performance.now()`:

- `first_draw_ms`: from navigation start to the frame after the page's
  `ready` (the report fetched, the whole trace's range fetched and drawn,
  the state at the peak fetched);
- `hover_all_ms`: a mousemove over the largest allocation live at the peak
  on the whole-trace view, to the next frame (`tip` says whether a tooltip
  showed);
- `zoom16_ms`: `zoomAt` the peak by 1/16 (what the wheel does: a range
  fetched and drawn), to the next frame;
- `zoom100_ms`: the 100 entries around the peak in full detail (what a
  drag does), then `hover100_ms` there;
- `pan_ms`: half a view to the right (the arrow button);
- `mid100_ms`: the 100 entries mid-trace in full detail;
- `all_ms`: back to the whole trace (double click);
- `click_ms`: a click at the peak (what is live there by category and
  site, and the allocator's segments and blocks there, fetched and drawn);
- `search_ms`: a search for QUERY (`train.py` by default; the hits'
  table and their marks drawn), then `hit_ms`: a click on the first
  site found (zoom onto its allocations);
- `oom_ms`: the first OOM jumped to (its range, what is live and the
  state just before it), when the trace holds one.

Not a test: figures go to docs/inspect-speed.md.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

CHROMIUM = "/usr/bin/chromium"

# installed before the page's script: records when `ready` resolves, and
# the next frame
HOOK = """
Object.defineProperty(window, 'ready', {configurable: true,
  get: function () { return this.__ready; },
  set: function (p) { this.__ready = p; p.then(function () {
    window.__ready_ms = performance.now();
    requestAnimationFrame(function () { window.__frame_ms = performance.now(); });
  }, function (e) { window.__error = String(e); }); }});
"""

ACTIONS = """
(async function () {
  var raf = function () {
    return new Promise(function (r) { requestAnimationFrame(function () { r(); }); });
  };
  var QUERY = QUERY_JSON;
  var pk = REP.peak_trace_index, r = {entries: N, bands_all: drawn, peak: pk};
  function hoverPeak() {
    var best = -1;
    C.bands.forEach(function (d, k) {
      if (d.s <= pk && pk < d.e && (best < 0 || d.sz > C.bands[best].sz)) best = k;
    });
    if (best < 0) return false;
    var d = C.bands[best], o = d.p[0][1];
    for (var j = 0; j < d.p.length && d.p[j][0] <= pk; j++) o = d.p[j][1];
    ev("mousemove", X(pk + 0.5), Y(o + d.sz / 2));
    return tip.style.display === "block";
  }
  var t = performance.now();
  r.tip_all = hoverPeak(); await raf(); r.hover_all_ms = performance.now() - t;
  ev("mouseleave", 0, 0);
  t = performance.now(); await zoomAt(X(pk), 1 / 16); await raf();
  r.zoom16_ms = performance.now() - t; r.zoom16 = [v0, v1, drawn];
  t = performance.now(); await show(pk - 50, pk + 50); await raf();
  r.zoom100_ms = performance.now() - t; r.zoom100 = [v0, v1, drawn];
  t = performance.now(); r.tip100 = hoverPeak(); await raf(); r.hover100_ms = performance.now() - t;
  ev("mouseleave", 0, 0);
  t = performance.now(); await pan(0.5); await raf();
  r.pan_ms = performance.now() - t; r.pan = [v0, v1, drawn];
  var m = Math.floor(N / 2);
  t = performance.now(); await show(m - 50, m + 50); await raf();
  r.mid100_ms = performance.now() - t; r.mid100 = [v0, v1, drawn];
  t = performance.now(); await show(0, N); await raf();
  r.all_ms = performance.now() - t; r.all = [v0, v1, drawn];
  t = performance.now(); await Promise.all([at(pk), state(pk)]); await raf();
  r.click_ms = performance.now() - t;
  t = performance.now(); var d = await search(QUERY); await raf();
  r.search_ms = performance.now() - t; r.search = [d.matched, d.sites.length];
  if (d.matched) {
    // what a click on the hits' first row does (its handler keeps no promise)
    t = performance.now();
    var a = Infinity, b = 0;
    HITS.hits.forEach(function (h) { if (h[3] === 0) { a = Math.min(a, h[0]); b = Math.max(b, h[1]); } });
    await show(a - (b - a) * 0.05, b + (b - a) * 0.05); await raf();
    r.hit_ms = performance.now() - t; r.hit = [v0, v1, drawn];
  }
  if (OOMS.length) {
    t = performance.now(); await jumpOom(OOMS[0][0]); await raf();
    r.oom_ms = performance.now() - t; r.oom = [v0, v1, drawn];
  }
  r.errors = errors.length;
  return r;
})()
"""


class Browser:
    """Headless Chromium over `--remote-debugging-pipe` (fd 3 in, fd 4 out;
    messages are JSON ended by a NUL byte)."""

    def __init__(self, profile):
        to_child, from_child = os.pipe(), os.pipe()
        # out of the way of 3 and 4, which the child's ends become
        self.fds = [os.dup2(fd, 100 + k) for k, fd in enumerate(to_child + from_child)]
        for fd in to_child + from_child:
            os.close(fd)
        child_in, self.w, self.r, child_out = self.fds

        def pre():
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        self.p = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            preexec_fn=pre,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(child_in)
        os.close(child_out)
        self.buf = b""
        self.next_id = 0
        self.session = None

    def call(self, method, params=None, timeout=120):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        end = time.time() + timeout
        while time.time() < end:
            while b"\0" not in self.buf:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                self.buf += chunk
            line, self.buf = self.buf.split(b"\0", 1)
            m = json.loads(line)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
        raise RuntimeError(f"{method}: no answer in {timeout} s")

    def eval(self, expr, timeout=120):
        r = self.call(
            "Runtime.evaluate", {"expression": expr, "awaitPromise": True, "returnByValue": True}, timeout
        )
        if "exceptionDetails" in r:
            raise RuntimeError(json.dumps(r["exceptionDetails"])[:500])
        return r["result"].get("value")

    def close(self):
        self.p.kill()
        self.p.wait()
        os.close(self.w)
        os.close(self.r)


def run_once(url, profile, query):
    b = Browser(profile)
    try:
        page = next(t for t in b.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        b.session = b.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})[
            "sessionId"
        ]
        b.call("Page.enable")
        b.call("Page.addScriptToEvaluateOnNewDocument", {"source": HOOK})
        b.call("Page.navigate", {"url": url})
        end = time.time() + 120
        while time.time() < end:
            got = b.eval(
                "[location.href, window.__frame_ms || null,"
                " window.__ready_ms || null, window.__error || null]"
            )
            if got[0].startswith(url) and (got[1] is not None or got[3] is not None):
                break
            time.sleep(0.01)
        else:
            raise RuntimeError("the page was not ready in 120 s")
        if got[3] is not None:
            raise RuntimeError(got[3])
        out = {"first_draw_ms": round(got[1], 1), "ready_ms": round(got[2], 1)}
        r = b.eval(ACTIONS.replace("QUERY_JSON", json.dumps(query)))
        out.update({k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()})
        return out
    finally:
        b.close()


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    vs, snap = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    query = sys.argv[4] if len(sys.argv) > 4 else "train.py"
    t0 = time.time()
    srv = subprocess.Popen([vs, "view", "--no-open", snap], stderr=subprocess.PIPE, text=True)
    url = None
    for line in srv.stderr:
        m = re.search(r"(http://127\.0\.0\.1:\d+/?)", line)
        if m:
            url = m.group(1)
            break
    if url is None:
        sys.exit("vramscope view printed no address")
    print(json.dumps({"server_ready_s": round(time.time() - t0, 2), "url": url}), flush=True)
    try:
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
            for k in range(runs):
                r = run_once(url, os.path.join(tmp, f"profile{k}"), query)
                print(json.dumps({"run": k + 1, **r}), flush=True)
    finally:
        srv.kill()
        srv.wait()


if __name__ == "__main__":
    main()
