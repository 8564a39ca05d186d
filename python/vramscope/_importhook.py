"""Functions run once a module has been imported: what patches a module that a program may
never import, so that the program pays for the import only where it makes it itself; and
functions that run a module's own code (`around_import`)."""

from __future__ import annotations

import functools
import sys

#: module name -> functions to call with the module once it has run
_HOOKS: dict[str, list] = {}
#: module name -> functions that run the module's code (`around_import`)
_AROUND: dict[str, list] = {}


def _hooked() -> bool:
    return bool(_HOOKS or _AROUND)


def after_import(name: str, fn) -> None:
    """Call `fn(module)` once the module `name` has run, at its first import from now on (not
    where it is imported already: see `sys.modules`). An exception from `fn` is the import's."""
    _HOOKS.setdefault(name, []).append(fn)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def around_import(name: str, fn) -> None:
    """Run the module `name`'s code, at its first import from now on, as `fn(module, run)`, which
    calls `run()` (the module's own code) once, in whatever context it sets up around it."""
    _AROUND.setdefault(name, []).append(fn)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def cancel(name: str, fn) -> None:
    """Forget `after_import(name, fn)` or `around_import(name, fn)` where it has not run yet."""
    for table in (_HOOKS, _AROUND):
        fns = table.get(name, [])
        if fn in fns:
            fns.remove(fn)
        if not fns:
            table.pop(name, None)
    if not _hooked() and _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


class _Loader:
    """The module's own loader, which calls the module's hooks once it has run."""

    def __init__(self, loader, name: str):
        self.loader = loader
        self.name = name

    def __getattr__(self, name):
        if name == "loader":  # not set yet (a copy)
            raise AttributeError(name)
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        # the module sees its own loader, as in any import
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        run = functools.partial(self.loader.exec_module, module)
        for wrap in _AROUND.get(self.name, []):
            run = functools.partial(wrap, module, run)
        run()
        _AROUND.pop(self.name, None)
        for fn in _HOOKS.pop(self.name, []):
            fn(module)
        if not _hooked() and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)


class _Finder:
    """A `sys.meta_path` finder for the hooked modules alone: the spec that the finders after it
    make, with the loader above."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _HOOKS and fullname not in _AROUND:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader, fullname)
        return spec

    def invalidate_caches(self) -> None:
        pass


_FINDER = _Finder()
