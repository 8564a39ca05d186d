"""Damage a protocol-4 snapshot pickle in place at a chosen kind of byte near
an offset, for timing `inspect`'s error on a large file (issue #36), and
put the byte back afterwards.

    python3 corrupt.py opcode FILE OFFSET   # the first EMPTY_DICT at or after OFFSET -> 0xff (no opcode)
    python3 corrupt.py value FILE OFFSET    # the first memo get in a trace entry's frames list at or
                                            # after OFFSET names a list instead of a frame dict
    python3 corrupt.py restore FILE AT OLD  # byte(s) at AT back to OLD (hex)

Prints one JSON line: the kind, the offset changed, the old and new bytes
(hex) and what the change does. `value` leaves a valid pickle: only the
conversion to a snapshot finds the frames list's item is no frame dict.
The file is never read whole: the frame headers are followed to the frame
holding OFFSET (every frame starts at an opcode), and the opcodes are
decoded from there over a few MB; the memo indices of the first objects
(to find a list and the 'frames' key) come from the file's first MB.
"""

import io
import json
import pickletools
import struct
import sys

FRAME = 0x95
GETS = ("BINGET", "LONG_BINGET")


def ops(buf, base):
    """(name, arg, absolute offset) of the opcodes in buf, up to where it is cut."""
    try:
        for op, arg, pos in pickletools.genops(io.BytesIO(buf)):
            yield op.name, arg, base + pos
    except Exception:  # the window ends mid-opcode or without STOP
        return


def early_memo(f):
    """Memo index -> (opcode that made it, its argument) for the file's first MB."""
    f.seek(0)
    memo, prev = [], None
    for name, arg, _ in ops(f.read(1 << 20), 0):
        if name == "MEMOIZE":
            memo.append(prev)
        elif name != "FRAME":
            prev = (name, arg)
    return memo


def frame_start(f, offset):
    """The start of the frame that holds offset (the file's frames followed from byte 2)."""
    f.seek(0, 2)
    size = f.tell()
    pos = 2
    while pos < size:
        f.seek(pos)
        head = f.read(9)
        if len(head) < 9 or head[0] != FRAME:
            sys.exit(f"no frame header at {pos}")
        n = struct.unpack("<Q", head[1:])[0]
        if pos + 9 + n > offset:
            return pos
        pos += 9 + n
    sys.exit("offset past the last frame")


def main():
    kind, path = sys.argv[1], sys.argv[2]
    with open(path, "r+b") as f:
        if kind == "restore":
            at, old = int(sys.argv[3]), bytes.fromhex(sys.argv[4])
            f.seek(at)
            f.write(old)
            print(json.dumps({"kind": "restore", "at": at, "bytes": old.hex()}))
            return
        offset = int(sys.argv[3])
        start = frame_start(f, offset)
        f.seek(start)
        window = list(ops(f.read(4 << 20), start))
        if kind == "opcode":
            for name, _, pos in window:
                if pos >= offset and name == "EMPTY_DICT":
                    change(f, pos, b"\xff", "an EMPTY_DICT (a dict's first opcode) made 0xff, no opcode")
                    return
            sys.exit("no EMPTY_DICT in the window")
        if kind != "value":
            sys.exit(f"unknown kind {kind}")
        memo = early_memo(f)
        frames_key = next(i for i, m in enumerate(memo) if m == ("SHORT_BINUNICODE", "frames"))
        lists = [i for i, m in enumerate(memo) if m is not None and m[0] == "EMPTY_LIST"]
        for k in range(len(window) - 4):
            n0, a0, p0 = window[k]
            if p0 < offset or n0 not in GETS or a0 != frames_key:
                continue
            if [w[0] for w in window[k + 1 : k + 4]] != ["EMPTY_LIST", "MEMOIZE", "MARK"]:
                continue
            name, arg, pos = window[k + 4]  # the frames list's first item
            if name == "LONG_BINGET":
                new = struct.pack("<I", lists[0])
                change(f, pos + 1, new, f"LONG_BINGET {arg} (a frame dict) -> {lists[0]} (a list)")
                return
            small = [i for i in lists if i < 256]
            if name == "BINGET" and small:
                change(f, pos + 1, bytes([small[0]]), f"BINGET {arg} (a frame dict) -> {small[0]} (a list)")
                return
        sys.exit("no frames list of memo gets in the window")


def change(f, at, new, what):
    f.seek(at)
    old = f.read(len(new))
    f.seek(at)
    f.write(new)
    print(json.dumps({"kind": sys.argv[1], "at": at, "old": old.hex(), "new": new.hex(), "what": what}))


main()
