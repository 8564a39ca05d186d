"""For each visible 2 MiB pinned mapping of forward0 after the first op (cuDNN's first SDPA, or
_local_scalar_dense): the holes (newest chunk first) of the replay's state just before it (sim.py variant F:
pool top 8 MiB a chunk, inv0 + invC), and the hole it went to with its offset from that hole's low end."""
import sim
from common import *
orig_place = None
for arch, name, d in all_runs():
    captured = []
    real_predict = sim.Sim.predict
    def spy(self, size, sizes_ok=None, _c=captured):
        _c.append(holes_of_state(self))
        return real_predict(self, size, sizes_ok)
    def holes_of_state(S):
        return sorted(sim.holes_of(S.chunks, S.occ), key=lambda h: -h[2][2])
    sim.Sim.predict = spy
    log = []
    b, pool = sim.run_one(arch, name, d, {"pool": "top8", "inv": True, "verbose": True}, log, {})
    sim.Sim.predict = real_predict
    # log lines and captured states are in the same order
    for line, hs in zip(log, captured):
        if line.split()[0] == "pin2":
            at = float(line.split("at")[1].split()[0]) * MIB + b
            h = next((h for h in hs if h[0] <= at < h[1]), None)
            desc = " ".join(f"[{mib(x[0],b):+.0f}..{mib(x[1],b):+.0f} #{x[2][2]}{'P' if x[2][3]=='pool' else ''}]" for x in hs[:5])
            print(f"{arch:4} {name[:40]:40} pin2 at {mib(at,b):+7.0f} " +
                  (f"in hole {mib(h[0],b):+.0f}..{mib(h[1],b):+.0f} (chunk #{h[2][2]}, rank {hs.index(h)} newest-first) offset {(at-h[0])/MIB:.0f}" if h else "in no hole") +
                  f" | holes newest first: {desc}")
