"""Three savings in transformers' imports, for `vramscope run`: a disk cache for its import
structure, one for the installed distributions' packages (`kept_distributions`), and its
optional libraries imported at their first use (`DEFERRED`).

`import transformers` and its first model class each call
`transformers.utils.import_utils.define_import_structure` on the `models` folder, which reads
every model's files for their `__all__` and `@requires` lines (transformers 5.x; 0.47 s a call
on one core of the dev machine, and the two calls differ in their arguments, so its own
`lru_cache` serves neither from the other). Its result is a function of the folder's files alone,
so it is kept on disk, beside a listing of every file it could read (name, size, modification
and change times, inode) and the stamp of the `import_utils.py` that computed it; a later run
whose listing and stamp are equal reads the result back instead of reading the files. Python
checks its bytecode cache against a source's size and modification time the same way. A file
written in the same tick of the file system's clock as the listing could change again with an
equal stamp (git's "racily clean" files), so a result is stored only where every file's change
time, which only the kernel sets, is at least `SETTLED_NS` older than the listing. Any mismatch
or error (no such function, an unreadable or unwritable cache, a result `marshal` cannot store)
falls back to transformers' own computation.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import importlib
import marshal
import os
import sys
import time
import types

from . import _importhook

#: the module whose function is cached, and the function
_MODULE = "transformers.utils.import_utils"
_FUNCTION = "define_import_structure"
#: changes whenever what a cache file holds changes
_FORMAT = 1
#: how much older than the listing every file's change time must be for a result to be stored:
#: file systems stamp times from a coarse clock (a kernel tick; FAT's 2 s), which may also lag
#: `time.time_ns`
SETTLED_NS = 5_000_000_000


def cache_dir() -> str:
    """Where the results are kept: `$XDG_CACHE_HOME/vramscope/transformers`, else under
    `~/.cache`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "vramscope", "transformers")


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    """What identifies a file's content without reading it: size, modification and change times
    (the change time moves on any write, even one that sets the modification time back), inode."""
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _listing(directory: str, out: list) -> list:
    """Every entry `create_import_structure_from_path` sees under `directory` (it skips
    `__pycache__` and follows symbolic links), in its order: (path, stamp) for files, (path,
    None) for folders, recursively."""
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name == "__pycache__":
                continue
            if entry.is_dir():
                out.append((entry.path, None))
                _listing(entry.path, out)
            else:
                out.append((entry.path, _stamp(entry.stat())))
    return out


def _kept(header: tuple, list_files, compute, fresh=lambda: True, stamps: tuple = ()):
    """`compute()`, read back from the cache file that `header` names where the header and the
    listing (`list_files()`: pairs of a path and its stamp, or None) are those it was stored
    with, else computed and stored: where `fresh()` after the computation, and where every stamp
    (the listing's and `stamps`) changed at least `SETTLED_NS` before the listing was made. Any
    error falls back to `compute()`."""
    try:
        now = time.time_ns()
        listing = list_files()
        name = hashlib.sha256(repr(header).encode()).hexdigest()[:32] + ".marshal"
        file = os.path.join(cache_dir(), name)
    except Exception:
        return compute()
    try:
        with open(file, "rb") as f:
            stored = marshal.load(f)
        if stored[0] == header and stored[1] == listing:
            return stored[2]
    except Exception:
        pass
    result = compute()
    try:
        if not fresh():
            return result
        settled = list(stamps) + [stamp for _, stamp in listing if stamp is not None]
        if any(stamp[2] > now - SETTLED_NS for stamp in settled):
            return result
        data = marshal.dumps((header, listing, result))
        if marshal.loads(data)[2] == result:  # stored as computed, or not at all
            os.makedirs(os.path.dirname(file), exist_ok=True)
            tmp = f"{file}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, file)
    except Exception:
        pass
    return result


def cached(compute, code_stamp: tuple, module_path, prefix=None, hits=lambda: 0):
    """`compute(module_path, prefix)`, read from the cache where the folder's listing and
    `code_stamp` are those it was computed with, else computed and stored. `hits()`: the hits
    of an in-process cache below `compute` (transformers' `lru_cache` of
    `create_import_structure_from_path`); a result that used one may predate the listing and
    is not stored."""
    try:
        path = os.fspath(module_path)
        directory = os.path.dirname(path) if os.path.isfile(path) else path
        header = (_FORMAT, sys.version, code_stamp, os.path.abspath(directory), prefix)
    except Exception:
        return compute(module_path, prefix)
    before = hits()
    return _kept(
        header,
        lambda: _listing(directory, []),
        lambda: compute(module_path, prefix),
        lambda: hits() == before,
        (code_stamp,),
    )


#: the files of a `.dist-info` or `.egg-info` folder that `packages_distributions` reads: the
#: distribution's name, its declared packages, its files (importlib/metadata/__init__.py)
_DIST_FILES = ("METADATA", "PKG-INFO", "top_level.txt", "RECORD", "installed-files.txt", "SOURCES.txt")


def _distributions_listing() -> list:
    """What `importlib.metadata.packages_distributions()` reads, stamped: each `sys.path` entry
    (a folder's stamp moves when a distribution's folder or a package comes or goes in it), and
    in each folder every `.dist-info` and `.egg-info` entry with its files (`_DIST_FILES`). What
    it is not: the packages' own files, which Python 3.12 checks exist (`skip_missing_files`) to
    name a distribution's packages from its RECORD; a package's name goes only with its last
    file, and its folder or module with it."""
    out: list = []
    for entry in sys.path:
        folder = entry or "."
        try:
            st = os.stat(folder)
        except OSError:
            out.append((folder, None))
            continue
        out.append((folder, _stamp(st)))
        if not os.path.isdir(folder):
            continue
        with os.scandir(folder) as found:
            infos = sorted(e.path for e in found if e.name.endswith((".dist-info", ".egg-info")))
        for info in infos:
            out.append((info, _stamp(os.stat(info))))
            for name in _DIST_FILES if os.path.isdir(info) else ():
                try:
                    out.append((os.path.join(info, name), _stamp(os.stat(os.path.join(info, name)))))
                except FileNotFoundError:
                    pass
    return out


def kept_distributions(compute):
    """`compute()` (`importlib.metadata.packages_distributions`), read from the cache where
    `_distributions_listing` is what it was computed with, else computed and stored. Only where
    `sys.meta_path`'s one finder of distributions is `PathFinder` (the one the listing
    follows)."""
    from importlib.machinery import PathFinder

    finders = [f for f in sys.meta_path if getattr(f, "find_distributions", None) is not None]
    if finders != [PathFinder]:
        return compute()
    header = (_FORMAT, sys.version, "packages_distributions", tuple(sys.path))
    return _kept(header, _distributions_listing, compute)


def _with_kept_distributions(module, run) -> None:
    """Run `module`'s code (transformers/utils/import_utils.py, whose
    `PACKAGE_DISTRIBUTION_MAPPING = importlib.metadata.packages_distributions()` reads every
    installed distribution's files: 0.55 s of its import on the H100 machine's 197
    distributions; docs/performance.md) with that function served from the cache
    (`kept_distributions`)."""
    import importlib.metadata as md

    real = md.packages_distributions

    def packages_distributions():
        return kept_distributions(real)

    _swapped(md, "packages_distributions", packages_distributions, run)


def _swapped(owner, name: str, value, run) -> None:
    """`run()` with `owner.name` set to `value`; then the former value is put back, unless
    something else replaced `value` meanwhile."""
    real = getattr(owner, name)
    setattr(owner, name, value)
    try:
        run()
    finally:
        if getattr(owner, name) is value:
            setattr(owner, name, real)


def _patch(module) -> None:
    """Replace the module's `define_import_structure` (an `lru_cache` over the computation) with
    one whose computation goes through `cached`; nothing where it is not such a function."""
    original = getattr(module, _FUNCTION, None)
    compute = getattr(original, "__wrapped__", None)
    if compute is None or not hasattr(original, "cache_clear"):
        return
    below = getattr(getattr(module, "create_import_structure_from_path", None), "cache_info", None)
    if below is None:
        return

    def hits() -> int:
        return below().hits

    try:
        code_stamp = _stamp(os.stat(module.__file__))
    except (OSError, TypeError):
        return

    @functools.lru_cache
    def define_import_structure(module_path, prefix=None):
        return cached(compute, code_stamp, module_path, prefix, hits)

    functools.update_wrapper(define_import_structure, compute)
    setattr(module, _FUNCTION, define_import_structure)


def _patch_quietly(module) -> None:
    try:
        _patch(module)
    except Exception:
        pass


#: transformers' modules that import an optional library at their top only for functions that
#: call it (`if is_sklearn_available(): from sklearn.metrics import roc_curve`,
#: generation/candidate_generator.py; `from scipy.optimize import linear_sum_assignment`, the
#: detection losses): the module -> (the library's module, the names it takes). Every model
#: class imports them (`modeling_utils` imports `generation.utils` and `loss.loss_utils`), so a
#: machine with scikit-learn installed (the GPU machine) pays for `sklearn.metrics` (scipy,
#: pandas, joblib) in every script that uses a model: 0.9 to 1.4 s of CPU in a `vramscope run` of
#: benches/llama8b_train_step.py on one core of the dev machine, 1.8 s in a plain run of its
#: imports (`-X importtime`; docs/performance.md).
DEFERRED = {
    "transformers.generation.candidate_generator": ("sklearn.metrics", ("roc_curve",)),
    **{
        f"transformers.loss.loss_{loss}": ("scipy.optimize", ("linear_sum_assignment",))
        for loss in (
            "for_object_detection",
            "deformable_detr",
            "grounding_dino",
            "lw_detr",
            "rf_detr",
            "rt_detr",
        )
    },
}


def _deferred(library: str, name: str, namespace: dict):
    """A function standing for `library.name` in the module namespace `namespace` until its first
    call, which imports `library`, puts the function itself in its place there and calls it."""

    def deferred(*args, **kwargs):
        fn = getattr(importlib.import_module(library), name)
        if namespace.get(name) is deferred:
            namespace[name] = fn
        return fn(*args, **kwargs)

    deferred.__name__ = deferred.__qualname__ = name
    deferred.__module__ = library
    return deferred


def _defer(module, run) -> None:
    """Run `module`'s code (`run()`) with its `from LIBRARY import NAMES` (`DEFERRED`'s) binding
    stand-ins (`_deferred`) for the names, where LIBRARY is not imported yet: the library is
    imported at the first call of one of them, if ever. Any other import is the import's own."""
    library, names = DEFERRED[module.__name__]
    namespace = module.__dict__
    real = builtins.__import__

    def import_(name, globals=None, locals=None, fromlist=(), level=0):
        if (
            name == library
            and globals is namespace
            and level == 0
            and fromlist
            and all(n in names for n in fromlist)
            and name not in sys.modules
        ):
            return types.SimpleNamespace(**{n: _deferred(library, n, namespace) for n in fromlist})
        return real(name, globals, locals, fromlist, level)

    _swapped(builtins, "__import__", import_, run)


def install() -> None:
    """Cache the import structure of the transformers that this process imports from now on, and
    defer its optional libraries (`DEFERRED`; nothing for a module imported already)."""
    if _MODULE not in sys.modules:
        _importhook.around_import(_MODULE, _with_kept_distributions)
        _importhook.after_import(_MODULE, _patch_quietly)
    for module in DEFERRED:
        if module not in sys.modules:
            _importhook.around_import(module, _defer)


def remove() -> None:
    """Undo `install` where transformers was not imported since."""
    _importhook.cancel(_MODULE, _patch_quietly)
    _importhook.cancel(_MODULE, _with_kept_distributions)
    for module in DEFERRED:
        _importhook.cancel(module, _defer)
