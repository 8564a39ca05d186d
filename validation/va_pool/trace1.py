"""Verbose replay of one run under one variant of sim.py: python3 trace1.py ARCH NAME VARIANT_LETTER"""
import sim, sys
from common import *
arch, name, letter = sys.argv[1], sys.argv[2], sys.argv[3]
V = {"F": {"pool": "top8", "inv": True}, "G": {"pool": "top8", "inv": True, "invD": 8 * MIB},
     "C": {"pool": "top8", "inv": False}, "H": {"pool": "top8", "inv": True, "invD": 2 * MIB, "invD_n": 4}}[letter]
V = dict(V, verbose=True)
for a, n, d in all_runs():
    if a == arch and n.startswith(name):
        log = []; sim.run_one(a, n, d, V, log, {}); print("\n".join(log[:int(sys.argv[4]) if len(sys.argv) > 4 else 60]))
