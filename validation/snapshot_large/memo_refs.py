"""Memo references across pieces of a snapshot pickle (issue #36's parallel
decoder): cut the file into pieces of PIECE bytes, and count, for the memo
gets of each piece, how many name an index stored in an earlier piece, and
how many distinct such indices each piece names, by the kind of opcode
that made the object.

    python3 memo_refs.py FILE [PIECE_BYTES]
"""
import pickletools, sys, collections
path = sys.argv[1]
piece = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
data = open(path, 'rb').read()
memo_pos = []          # memo index -> position of the MEMOIZE
memo_kind = []         # memo index -> opcode name of the object before it
prev = None
gets = 0; cross = 0; pieces = collections.defaultdict(set); own = 0
kinds = collections.Counter(); puts_other = 0
for op, arg, pos in pickletools.genops(data):
    n = op.name
    if n == 'MEMOIZE':
        memo_pos.append(pos); memo_kind.append(prev)
    elif n in ('PUT', 'BINPUT', 'LONG_BINPUT'):
        puts_other += 1
    elif n in ('BINGET', 'LONG_BINGET', 'GET'):
        gets += 1
        p = pos // piece
        if memo_pos[arg] // piece < p:
            cross += 1
            pieces[p].add(arg)
            kinds[memo_kind[arg]] += 1
        else:
            own += 1
    if n not in ('MEMOIZE', 'FRAME'):
        prev = n
np = len(data) // piece + 1
distinct = [len(pieces[p]) for p in range(np)]
print(f"{path}: {len(data)} bytes, {np} pieces of {piece}, {len(memo_pos)} MEMOIZE, {puts_other} other puts")
print(f"gets {gets}: {cross} name an earlier piece's object ({cross / max(gets, 1):.1%}), {own} the same piece's")
print(f"distinct earlier objects named per piece: max {max(distinct)}, mean {sum(distinct) / np:.0f}, total {sum(distinct)}")
print("earlier objects named, by the opcode that made them:", dict(kinds.most_common(8)))
