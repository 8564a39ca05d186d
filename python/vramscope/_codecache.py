"""A disk cache for the functions `dataclasses` compiles, for `vramscope run`.

Each `@dataclass` class compiles its methods from generated source text (`dataclasses._create_fn`
calls `exec(text, globals, ns)`; 3.13's `_FuncBuilder` one `exec` per class): some 3,100 texts
compiled while torch, torch._dynamo and transformers are imported, 0.16 s of CPU on one core of
the dev machine. A code object is a function of its text, the compiler's flags and the interpreter
alone, so `install` gives the `dataclasses` module an `exec` of its own (a module's global comes
before the builtin) that compiles each text as the builtin would (`"<string>"`, the caller's
`__future__` flags, no others inherited) once, keeps the code objects by text and runs them with
the builtin `exec`; the texts compiled are stored on disk (`marshal`, as Python's own bytecode
cache stores a module's code) for the next process of the same interpreter. A cache that cannot be
read or written is compiled around, and nothing is written where Python writes no bytecode
(`sys.dont_write_bytecode`).
"""

from __future__ import annotations

import atexit
import builtins
import importlib.util
import marshal
import os
import sys
import types

#: changes whenever what a cache file holds changes
_FORMAT = 2
#: the `__future__` flags that `exec` passes on from its caller to the compiler (`PyCF_MASK`,
#: CPython's Include/cpython/compile.h)
_FUTURE_FLAGS = (
    0x20000  # division
    | 0x40000  # absolute_import
    | 0x80000  # with_statement
    | 0x100000  # print_function
    | 0x200000  # unicode_literals
    | 0x400000  # barry_as_FLUFL
    | 0x800000  # generator_stop
    | 0x1000000  # annotations
)
#: what a stored result was compiled by: it is read back only by the same
_HEADER = (_FORMAT, sys.version, importlib.util.MAGIC_NUMBER, sys.flags.optimize)
#: the most texts a cache file keeps (about 1.2 KB each): past it, a process stores only its own
MAX_ENTRIES = 20_000


def cache_file() -> str:
    """Where the code is kept: `$XDG_CACHE_HOME/vramscope/dataclasses/TAG-oN.marshal` (TAG the
    interpreter's bytecode tag, N its optimization level), else under `~/.cache`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    name = f"{sys.implementation.cache_tag}-o{sys.flags.optimize}.marshal"
    return os.path.join(base, "vramscope", "dataclasses", name)


class CodeCache:
    """Code objects by (`__future__` flags, source text), read from and written to `path`; each
    stored one is kept as its `marshal` bytes until a text asks for it, so a file that holds
    other programs' texts too costs little more than its reading."""

    def __init__(self, path: str):
        self.path = path
        #: the file's code, as `marshal` bytes
        self.stored: dict = {}
        #: this process's code objects, compiled or read
        self.codes: dict = {}
        self.compiled = 0
        try:
            with open(path, "rb") as f:
                stored = marshal.load(f)
            if stored[0] == _HEADER and isinstance(stored[1], dict):
                self.stored = stored[1]
        except Exception:
            pass

    def exec(self, source, globals=None, locals=None, /):
        """The builtin `exec`, with a text compiled as the builtin compiles it (its caller's
        `__future__` flags) taken from the cache."""
        if type(source) is str:
            flags = sys._getframe(1).f_code.co_flags & _FUTURE_FLAGS
            key = (flags, source)
            code = self.codes.get(key)
            if code is None:
                code = self._read(key)
                if code is None:
                    code = compile(source, "<string>", "exec", flags, dont_inherit=True)
                    self.compiled += 1
                self.codes[key] = code
            source = code
        return builtins.exec(source, globals, locals)

    def _read(self, key):
        data = self.stored.get(key)
        if data is None:
            return None
        try:
            code = marshal.loads(data)
        except Exception:
            return None
        return code if type(code) is types.CodeType else None

    def save(self) -> None:
        """Store the code where this process compiled any, beside the file's (only this
        process's where that would pass `MAX_ENTRIES`; nothing where Python writes no bytecode,
        or where the file cannot be written)."""
        if not self.compiled or sys.dont_write_bytecode:
            return
        try:
            entries = dict(self.stored) if len(self.stored) + self.compiled <= MAX_ENTRIES else {}
            for key, code in self.codes.items():
                if key not in entries:
                    entries[key] = marshal.dumps(code)
            data = marshal.dumps((_HEADER, entries))
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = f"{self.path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path)
            self.stored = entries
            self.compiled = 0
        except Exception:
            pass


def install(path: str | None = None) -> CodeCache | None:
    """Compile `dataclasses`' methods through a `CodeCache` from now on, stored at the process's
    exit; None where `dataclasses` has an `exec` of its own already."""
    import dataclasses

    if "exec" in vars(dataclasses):
        return None
    cache = CodeCache(cache_file() if path is None else path)
    dataclasses.exec = cache.exec
    atexit.register(cache.save)
    return cache


def remove(cache: CodeCache) -> None:
    """Give `dataclasses` the builtin `exec` back (where `install` gave it `cache`'s)."""
    import dataclasses

    if vars(dataclasses).get("exec") == cache.exec:
        del dataclasses.exec
    atexit.unregister(cache.save)
