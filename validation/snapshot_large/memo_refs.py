"""Memo references across pieces of a snapshot pickle (issue #36's parallel
decoder): cut the file into pieces of PIECE bytes and count how many memo
gets of each piece name an index stored in an earlier piece, and how many
distinct such indices a piece names, by the opcode that made the object.

    python3 memo_refs.py FILE [PIECE_BYTES]
"""

import collections
import pickletools
import sys

path = sys.argv[1]
piece = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
data = open(path, "rb").read()
memo_pos = []  # memo index -> position of its MEMOIZE
memo_kind = []  # memo index -> the opcode that made the object
prev = None
gets = cross = own = other_puts = 0
named = collections.defaultdict(set)  # piece -> earlier indices it names
kinds = collections.Counter()
for op, arg, pos in pickletools.genops(data):
    n = op.name
    if n == "MEMOIZE":
        memo_pos.append(pos)
        memo_kind.append(prev)
    elif n in ("PUT", "BINPUT", "LONG_BINPUT"):
        other_puts += 1
    elif n in ("BINGET", "LONG_BINGET", "GET"):
        gets += 1
        p = pos // piece
        if memo_pos[arg] // piece < p:
            cross += 1
            named[p].add(arg)
            kinds[memo_kind[arg]] += 1
        else:
            own += 1
    if n not in ("MEMOIZE", "FRAME"):
        prev = n
pieces = len(data) // piece + 1
distinct = [len(named[p]) for p in range(pieces)]
print(f"{path}: {len(data)} bytes, {pieces} pieces of {piece}")
print(f"{len(memo_pos)} MEMOIZE, {other_puts} other puts, {gets} gets")
print(f"{cross} gets name an earlier piece's object ({cross / max(gets, 1):.1%}), {own} their own piece's")
print(f"distinct earlier objects a piece names: max {max(distinct)}, mean {sum(distinct) / pieces:.0f}")
print("earlier objects named, by the opcode that made them:", dict(kinds.most_common(8)))
