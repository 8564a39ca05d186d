"""What torch's imports ask `inspect`, answered as it answers at less cost, for `vramscope run`.

`torch.library`'s `register_fake` (130 calls while torch, torch._dynamo and transformers are
imported) asks `inspect.getmodule` for its caller's module, and `torch._library.utils.get_source`
for its caller's file and line, which it reads with `inspect.getframeinfo`: 0.09 s of CPU on one
core of the dev machine together, most of it system calls.
- Where `inspect.getmodule` has not yet mapped an object's file to a module, it maps every module
  imported since its last walk: each one's absolute file and that file's `os.path.realpath`
  (Lib/inspect.py, the same from 3.11 to 3.13), which checks each component of each path for a
  symbolic link: 21,000 `lstat` calls over some 2,300 modules. `getmodule` here makes that walk
  itself first, with the same results in the same order, then calls inspect's own (which finds
  every module mapped, and answers as always); the walk resolves each folder once (`_realpath`)
  rather than once per module below it.
- `getframeinfo` with its default context of one line also reads the caller's source file (into
  `linecache`) for the line's text, which `get_source` does not use; `get_source` here asks for no
  context, so the file and line are computed as before and no file is read.
"""

from __future__ import annotations

import inspect
import os
import posixpath
import sys
import types

from . import _importhook

#: the objects for which `inspect.getmodule` may walk `sys.modules` (the others have a
#: `__module__`, or are modules)
_WALKED = (types.FrameType, types.CodeType, types.TracebackType)


def _realpath(path: str, resolved: dict) -> str:
    """`os.path.realpath(path)` for an absolute, normalized `path`, each folder above it resolved
    once per walk (`resolved`): `posixpath.realpath` resolves a path's components from the left,
    so its answer is its folder's, joined with the last component unless that is a link."""
    known = resolved.get(path)
    if known is not None:
        return known
    head, tail = os.path.split(path)
    if not head or not tail or head == path:
        real = os.path.realpath(path)
    else:
        joined = os.path.join(_realpath(head, resolved), tail)
        real = os.path.realpath(joined) if os.path.islink(joined) else joined
    resolved[path] = real
    return real


def _map_modules() -> None:
    """`inspect.getmodule`'s walk: every module whose file it has not mapped yet, mapped by its
    absolute file and that file's real path (the same writes, in the same order)."""
    by_name = inspect._filesbymodname
    by_file = inspect.modulesbyfile
    resolved: dict = {}
    for modname, module in sys.modules.copy().items():
        if inspect.ismodule(module) and hasattr(module, "__file__"):
            f = module.__file__
            if f == by_name.get(modname, None):
                continue
            by_name[modname] = f
            f = inspect.getabsfile(module)
            by_file[f] = by_file[_realpath(f, resolved)] = module.__name__


def getmodule(object, _filename=None):
    """`inspect.getmodule(object, _filename)`, its walk made by `_map_modules` first where it
    would make one."""
    if type(object) in _WALKED and not (_filename is not None and _filename in inspect.modulesbyfile):
        try:
            file = inspect.getabsfile(object, _filename)
        except (TypeError, FileNotFoundError):
            file = None
        if file is not None and file not in inspect.modulesbyfile:
            _map_modules()
    return _ORIGINAL(object, _filename)


_ORIGINAL = inspect.getmodule


def get_source(stacklevel: int) -> str:
    """`torch._library.utils.get_source`: "FILE:LINE" of the frame `stacklevel` above its caller,
    from `inspect.getframeinfo` with no lines of context."""
    frame = inspect.getframeinfo(sys._getframe(stacklevel), context=0)
    return f"{frame.filename}:{frame.lineno}"


#: the names torch 2.11's `get_source` uses: another is left as it is
_GET_SOURCE_NAMES = ("inspect", "getframeinfo", "sys", "_getframe", "filename", "lineno")


def _patch_get_source(module) -> None:
    original = getattr(module, "get_source", None)
    code = getattr(original, "__code__", None)
    if code is not None and code.co_names == _GET_SOURCE_NAMES and code.co_argcount == 1:
        module.get_source = get_source


def install() -> None:
    """Give `inspect` this `getmodule` (not where it has another already, where paths are not
    POSIX paths, or where inspect lacks the caches it walks into: another Python), and the
    `torch._library.utils` that this process imports from now on this `get_source`."""
    if "torch._library.utils" not in sys.modules:
        _importhook.after_import("torch._library.utils", _patch_get_source)
    if (
        inspect.getmodule is _ORIGINAL
        and os.path is posixpath
        and isinstance(getattr(inspect, "_filesbymodname", None), dict)
        and isinstance(getattr(inspect, "modulesbyfile", None), dict)
    ):
        inspect.getmodule = getmodule


def remove() -> None:
    """Give `inspect` its own `getmodule` back (and forget `get_source` where torch was not
    imported since `install`)."""
    _importhook.cancel("torch._library.utils", _patch_get_source)
    if inspect.getmodule is getmodule:
        inspect.getmodule = _ORIGINAL
