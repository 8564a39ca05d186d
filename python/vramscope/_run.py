"""`vramscope run SCRIPT [ARGS...]`: a PyTorch program on the simulated GPU."""

from __future__ import annotations

import argparse
import atexit
import builtins
import gc
import json
import os
import runpy
import sys

HELP = """\
Run an unmodified PyTorch script on a machine without a GPU: its CUDA
tensors live on vramscope's twin of the GPU (PyTorch 2.11's caching
allocator, cuBLAS workspaces, the kernels' choices for that GPU), and
torch.cuda's memory API answers as the GPU would at that point of the
program, out-of-memory errors included.

Phases end at each torch.cuda.reset_peak_memory_stats() call and at each
vramscope.phase("name") marker; the report gives each one's peak.

examples:
  vramscope run train.py --epochs 1
  vramscope run --gpu h200 --json report.json infer.py
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True vramscope run train.py

exit status: the script's own (1 for an uncaught exception, 130 for Ctrl-C,
as python's; the traceback is the script's own), 2 for a usage error of
vramscope itself.
"""


def format_size(n: int) -> str:
    """Bytes as PyTorch's out-of-memory message prints them ("1.50 GiB")."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} bytes"


def render_text(report: dict) -> str:
    """The terminal report."""
    limit = report.get("memory_limit")
    limited = "" if limit is None else f", limited to {format_size(limit)}"
    lines = [f"vramscope: {report['gpu']} ({format_size(report['total_memory'])}{limited})"]
    if report.get("gpu_estimated_constants"):
        lines.append("estimated for this GPU (not measured): " + ", ".join(report["gpu_estimated_constants"]))
    if not report["cuda_used"]:
        lines.append("the script never allocated CUDA memory")
        return "\n".join(lines) + "\n"
    head = f"{'phase':<20} {'peak allocated':>15} {'peak reserved':>15} {'allocated':>12} {'reserved':>12}"
    lines.append(head)
    for p in report["phases"]:
        lines.append(
            f"{p['name'][:20]:<20} {format_size(p['peak_allocated']):>15} "
            f"{format_size(p['peak_reserved']):>15} {format_size(p['allocated']):>12} "
            f"{format_size(p['reserved']):>12}"
        )
    lines.append(
        f"peak: {format_size(report['peak_allocated'])} allocated, "
        f"{format_size(report['peak_reserved'])} reserved"
    )
    at = report.get("at_peak") or {}
    if at.get("by_category"):
        parts = ", ".join(f"{k} {format_size(v)}" for k, v in at["by_category"].items())
        lines.append(f"live at the peak: {parts}")
    for source, nbytes in list((at.get("by_source") or {}).items())[:3]:
        lines.append(f"  {format_size(nbytes):>12}  {_short(source)}")
    if report["oom"]:
        lines.append("out of memory: " + report["oom"].splitlines()[0])
    if report["unmeasured"]:
        lines.append("not modelled (outputs counted, scratch not): " + ", ".join(report["unmeasured"]))
    return "\n".join(lines) + "\n"


def _short(source: str) -> str:
    """A source line with its file relative to the working directory where it lies below it."""
    path, sep, rest = source.partition(":")
    if sep and os.path.isabs(path):
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            return f"{rel}:{rest}"
        if "site-packages" in path:
            return f"{path.split('site-packages' + os.sep, 1)[1]}:{rest}"
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if path.startswith(package + os.sep):
            return f"{os.path.relpath(path, package)}:{rest}"
    return source


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line of `vramscope run`."""
    ap = argparse.ArgumentParser(
        prog="vramscope run",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--gpu",
        default="h100",
        help="the GPU to simulate: h100 (default), h200 (measured), or a100-40gb, a100-80gb, l40s, l4, "
        "a10g, rtx4090, rtx3090, t4, v100, b200 (constants partly estimated; the report names them)",
    )
    ap.add_argument(
        "--json",
        metavar="FILE",
        help="write the report as JSON (docs/json.md); '-' for stdout",
    )
    ap.add_argument(
        "--snapshot",
        metavar="FILE",
        help="write a memory-snapshot pickle (pytorch.org/memory_viz)",
    )
    ap.add_argument(
        "--html",
        metavar="FILE",
        help="write the self-contained HTML report of the run (vramscope inspect's)",
    )
    ap.add_argument(
        "--alloc-conf",
        metavar="S",
        help="PYTORCH_CUDA_ALLOC_CONF (default: the environment's)",
    )
    ap.add_argument(
        "--nproc",
        type=int,
        default=None,
        metavar="N",
        help="run a torchrun-style script as one rank of N (torch.distributed gets a process group "
        "whose collectives move no data; RANK, WORLD_SIZE, LOCAL_RANK are set as torchrun sets them)",
    )
    ap.add_argument(
        "--rank", type=int, default=0, metavar="R", help="the rank to run with --nproc (default 0)"
    )
    ap.add_argument("--quiet", action="store_true", help="no report on the terminal")
    ap.add_argument(
        "--example",
        action="store_true",
        help="run the built-in example (a GPT-2-small bf16 training step) instead of a script",
    )
    ap.add_argument("script", nargs="?", help="the Python script to run")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return ap.parse_args(argv)


def _hide_real_gpus() -> None:
    """Fix this process's CUDA device count at 0 before anything asks for it.

    The twin answers every CUDA question; a real GPU would only be touched by
    accident: the autograd engine starts a thread that sets each visible device
    (`Engine::start_device_threads`, torch/csrc/autograd/engine.cpp), creating a
    CUDA context on every GPU of the machine. The CUDA runtime reads
    CUDA_VISIBLE_DEVICES once, at its first call; the script then sees its own value.
    """
    import torch

    count = getattr(torch._C, "_cuda_getDeviceCount", None)
    if count is None:  # a CPU-only build of torch
        return
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        count()
    finally:
        if saved is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved


#: the script's module namespace, where the leading imports froze it (`_FreezeLeadingImports`)
_FROZEN_NAMESPACES: list[dict] = []


def _spare_final_collections() -> None:
    """At the process's exit, after the script's own atexit handlers (registered later, so run
    earlier): collect the garbage left (the script's globals and their cycles, finalizers run)
    once, then freeze what is still alive (`gc.freeze`), so that the interpreter's teardown
    (`Py_FinalizeEx`: the remaining atexit handlers, flushed streams, modules cleared) skips its
    full collections over every object torch and the script's libraries made. A namespace that
    was frozen is cleared first, as the collector clears a dict it collects (`dict_tp_clear`) and
    as the interpreter's teardown clears a `__main__` module's."""
    for namespace in _FROZEN_NAMESPACES:
        namespace.clear()
    _FROZEN_NAMESPACES.clear()
    gc.collect()
    gc.freeze()


def _freeze_setup(collecting: bool) -> None:
    """Before the script starts: move every object alive so far (torch's, torch._dynamo's and
    vramscope's modules, the twin) to the collector's permanent generation (`gc.freeze`), so that
    the full collections the script's imports and ops trigger no longer walk them. They live to
    the process's end anyway. The collector was off while they were made (`main`): the few cycles
    already garbage by then (torch's import makes some 8,500 objects of them, about 7 MB) stay
    until exit instead. Refcounting still frees frozen objects; the collector is then on again
    (`collecting`: as it was)."""
    gc.freeze()
    if collecting:
        gc.enable()


#: the instructions of a module's leading import statements, its docstring and a constant's
#: assignment (which make no object); any other ends them (`import *`, annotations too)
_LEADING_OPS = frozenset(
    (
        "RESUME",
        "NOP",
        "CACHE",
        "EXTENDED_ARG",
        "LOAD_CONST",
        "STORE_NAME",
        "IMPORT_NAME",
        "IMPORT_FROM",
        "SWAP",
        "POP_TOP",
    )
)


def _last_leading_import(path: str) -> int | None:
    """The bytecode offset of the last of the script's leading import statements: those its
    module runs first, with nothing but imports, a docstring and constants' assignments before
    them. None where it starts otherwise, or does not compile (runpy then says why). The code is
    compiled as `runpy.run_path` compiles it, so the offsets are those its frame runs."""
    import dis
    import io

    try:
        with io.open_code(path) as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        return None
    last = None
    for ins in dis.get_instructions(code):
        if ins.opname not in _LEADING_OPS:
            break
        if ins.opname == "IMPORT_NAME":
            last = ins.offset
    return last


class _FreezeLeadingImports:
    """`__import__` that freezes (`gc.freeze`) what is alive after each of the script's leading
    import statements: the objects of the modules they import (transformers' alone are some
    140,000), which live to the process's end too, so that the script's own full collections, and
    the one at its exit (`_spare_final_collections`), no longer walk them. Until the last of these
    statements, the script has run nothing else, so every object alive was made by an import; an
    import that allocates CUDA memory (the twin's) stops the freezing, so that no simulated tensor
    is ever frozen."""

    def __init__(self, script: str, last: int, cap):
        from . import _capture

        self.script = script
        self.last = last
        self.cap = cap
        self.real = builtins.__import__
        self.capture_file = _capture.__file__

    def __call__(self, name, globals=None, locals=None, fromlist=(), level=0):
        real = self.real
        f = sys._getframe(1)
        if f.f_code.co_filename == self.capture_file and f.f_back is not None:
            f = f.f_back  # through the capture's own `__import__`, which wraps this one
        code = f.f_code
        if code.co_filename != self.script or code.co_name != "<module>":
            return real(name, globals, locals, fromlist, level)
        last = f.f_lasti >= self.last
        try:
            return real(name, globals, locals, fromlist, level)
        except BaseException:
            last = True
            raise
        finally:
            if not self.cap.cuda_used:
                gc.freeze()
                if not _FROZEN_NAMESPACES:
                    # the script's own namespace is frozen too: it is cleared at exit
                    _FROZEN_NAMESPACES.append(f.f_globals)
            if last:
                self.remove()

    def remove(self) -> None:
        """Give `__import__` back (where the capture's own does not wrap this one, it calls the
        real one from then on)."""
        if builtins.__import__ is self:
            builtins.__import__ = self.real
        else:
            self.script = ""


#: `main`'s exit status, where it runs as the process's program (`_end_process`)
_EXIT_STATUS: list[int] = []


def _end_process() -> None:
    """The process's last atexit handler (registered before torch is imported, so run after
    every other: the script's, its libraries', `_spare_final_collections`): flush Python's and
    C's standard streams, as the interpreter's teardown does, then end the process with `main`'s
    status (`os._exit`). What is left is the interpreter's teardown (`Py_FinalizeEx` clearing
    every module torch, transformers and the script imported, then libtorch's static
    destructors): 0.2 s of CPU after an 8B Llama step on the dev machine, for objects that
    Python does not promise to finalize ("It is not guaranteed that __del__() methods are called
    for objects that still exist when the interpreter exits", the data model's `__del__`); the
    script's own objects were finalized before. Nothing where `main` did not return."""
    if not _EXIT_STATUS:
        return
    status = _EXIT_STATUS[0]
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            status = status or 120  # `Py_FinalizeEx`'s status where flushing stdout fails
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)  # C's stdio buffers (a C++ library's output)
    except Exception:
        return  # no C library to flush: let the interpreter end as it does
    os._exit(status)


#: exceptions the twin raises where PyTorch raises them (c10's errors as torch/csrc/Exceptions.h maps
#: them: OutOfMemoryError, AcceleratorError and NotImplementedError are RuntimeErrors)
_TORCH_ERRORS = (RuntimeError, ValueError, TypeError, IndexError)

#: torch's files whose frames hand an op to the twin's modes: `handle_torch_function` and the
#: `torch._dynamo.disable` wrapper PyTorch puts around a mode's `__torch_dispatch__`
_HANDOFF_FILES = tuple(
    os.sep + os.path.join("torch", *f)
    for f in (("overrides.py",), ("_compile.py",), ("_dynamo", "eval_frame.py"))
)


def _frames(tb) -> list:
    """The entries of the traceback `tb`, outermost first."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    return entries


def _without_twin(entries: list, exc: BaseException) -> list:
    """`entries` as the GPU's traceback has them: where the program called PyTorch and the twin
    took the op over (vramscope's frames, and what they called in torch: meta kernels,
    decompositions), the traceback ends at the program's call, as a CUDA kernel's error ends
    there; the twin's hand-off frames (`_HANDOFF_FILES`) go too, and a torch function the twin
    called again as itself (`F.cross_entropy` through its `__torch_function__`) is shown at its
    inner call, where PyTorch raises. Frames of the program the twin called back (a hook, a
    module's forward) stay, with torch's leading to them. An error of another kind raised in the
    twin's own code (a bug of vramscope's) keeps every frame, for its report."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    examples = os.path.join(package, "examples") + os.sep
    import sysconfig

    # torch's files and the standard library's (which the twin calls too: contextlib, functools)
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    torch_dir = os.path.dirname(torch_file) if torch_file else None
    libraries = tuple(d + os.sep for d in (torch_dir, sysconfig.get_paths()["stdlib"]) if d)

    def kind(t) -> str:
        f = t.tb_frame.f_code.co_filename
        if f.startswith(package) and not f.startswith(examples):
            return "twin"
        return "torch" if f.startswith(libraries) or f.startswith("<frozen ") else "program"

    kinds = [kind(t) for t in entries]
    if not entries or (kinds[-1] == "twin" and not isinstance(exc, _TORCH_ERRORS)):
        return entries
    out: list = []
    i = 0
    while i < len(entries):
        if kinds[i] != "twin":
            out.append(entries[i])
            i += 1
            continue
        while out and out[-1].tb_frame.f_code.co_filename.endswith(_HANDOFF_FILES):
            out.pop()
        # the twin's part: up to the program's next frame (a call back), else to the end
        j = next((k for k in range(i, len(entries)) if kinds[k] == "program"), len(entries))
        if j == len(entries):
            if out and kind(out[-1]) == "torch":
                code = out[-1].tb_frame.f_code
                again = [t for t in entries[i:] if t.tb_frame.f_code is code]
                if again:
                    out[-1] = again[-1]
        else:
            last_twin = max(k for k in range(i, j) if kinds[k] == "twin")
            out.extend(entries[last_twin + 1 : j])
        i = j
    return out


def _traceback_of(entries: list):
    """A traceback of `entries` (`types.TracebackType`, as python builds one)."""
    import types

    tb = None
    for t in reversed(entries):
        tb = types.TracebackType(tb, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return tb


def _script_traceback(e: BaseException, script: str):
    """The traceback python would print for the script's uncaught `e`: from the script's first
    frame on (`vramscope run`'s and runpy's above it dropped), without the twin's frames
    (`_without_twin`; in the exceptions it chains too). Where no frame is the script's: none
    for a SyntaxError of the script itself (its compilation's, which python prints so), else
    `e`'s whole (an error of vramscope's own, before or after the script)."""
    entries = _frames(e.__traceback__)
    first = next((i for i, t in enumerate(entries) if t.tb_frame.f_code.co_filename == script), None)
    if first is None:
        if isinstance(e, SyntaxError) and e.filename == script:
            return None
        return e.__traceback__
    seen = {id(e)}
    chained = [e.__cause__, e.__context__]
    while chained:
        x = chained.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        x.__traceback__ = _traceback_of(_without_twin(_frames(x.__traceback__), x))
        chained += [x.__cause__, x.__context__]
    return _traceback_of(_without_twin(entries[first:], e))


def _run_path(path: str, argv0: str) -> dict:
    """`runpy.run_path(path, run_name="__main__")`, with `sys.argv[0]` as python leaves it for
    the script: `argv0`, the path as given (run_path sets it to `path`, through its
    `_ModifiedArgv0`; its own is put back as the script starts, for any run_path the script
    makes)."""
    modified = getattr(runpy, "_ModifiedArgv0", None)
    if modified is None:
        return runpy.run_path(path, run_name="__main__")

    class _Argv0(modified):
        def __init__(self, value):
            super().__init__(argv0)

        def __enter__(self):
            runpy._ModifiedArgv0 = modified
            return super().__enter__()

    runpy._ModifiedArgv0 = _Argv0
    try:
        return runpy.run_path(path, run_name="__main__")
    finally:
        runpy._ModifiedArgv0 = modified


def _print_uncaught(e: BaseException, script: str) -> None:
    """Print the script's uncaught exception as python does: through `sys.excepthook` (which the
    script may have set), with the script's own traceback (`_script_traceback`), set on the
    exception too (python's own hook prints the exception's `__traceback__` where it has one)."""
    try:
        e.__traceback__ = _script_traceback(e, script)
    except Exception:  # (never hide the error itself)
        pass
    sys.excepthook(type(e), e, e.__traceback__)


#: the words of value stack that `_with_stack_room`'s frame reserves (512 KiB on a 64-bit build)
STACK_ROOM = 1 << 16


def _with_stack_room(fn, *args):
    """`fn(*args)`, called from a frame that reserves `STACK_ROOM` words of CPython's frame stack.

    CPython (3.11 on) keeps its Python frames on a stack of chunks: a frame that does not fit in
    the current chunk gets a new one, mapped for it (`push_chunk`, 16 KiB at least, the size
    doubled until the frame fits), which is unmapped again when that frame returns
    (`_PyThreadState_PopFrame`; Python/pystate.c). Code that calls across a chunk's end in a loop
    maps and unmaps a chunk at each call: below `vramscope run`'s own frames, the 8B Llama step's
    process did so about 22,800 times, nearly all in the imports of torch, torch._dynamo and
    transformers (strace; a plain `python -c` of the script's imports, 3,200 times; from this
    frame, 60 times). This frame's own chunk is 1 MiB, half of it reserved here
    and never written, and the frames below it share the other half: they cross a chunk's end
    only past 512 KiB of frames. Nothing else changes: the reserved words are never written, so
    no memory is committed for them, and the recursion limit counts frames, not words."""
    return fn(*args)


_with_stack_room.__code__ = _with_stack_room.__code__.replace(
    co_stacksize=_with_stack_room.__code__.co_stacksize + STACK_ROOM
)


def main(argv: list[str], process: bool = False) -> int:
    """Run the script; returns the exit status. `process`: this is the process's program (the
    `vramscope` command), which ends without the interpreter's teardown (`_end_process`)."""
    ns = parse(argv)
    if process:
        atexit.register(_end_process)
    if ns.example:
        if ns.script:
            ns.args.insert(0, ns.script)
        ns.script = os.path.join(os.path.dirname(__file__), "examples", "train_gpt.py")
    if ns.script is None:
        for flag in ("json", "snapshot", "html"):
            taken = getattr(ns, flag)
            if taken and taken.endswith(".py"):
                # `vramscope run --json train.py`: the option took the script as its FILE
                file = "-" if flag == "json" else f"run.{flag}"
                print(
                    f"vramscope run: --{flag} takes a FILE to write, and it took {taken!r}: give "
                    f"the script after it (e.g. `vramscope run --{flag} {file} {taken}`)",
                    file=sys.stderr,
                )
                return 2
        print("vramscope run: give a script to run (or --example)", file=sys.stderr)
        return 2
    if os.path.isdir(ns.script):
        main_py = os.path.join(ns.script, "__main__.py")
        print(
            f"vramscope run: {ns.script} is a directory; expected a Python script"
            + (f" (its {main_py}, which python would run)" if os.path.isfile(main_py) else ""),
            file=sys.stderr,
        )
        return 2
    if not os.path.isfile(ns.script):
        print(f"vramscope run: no such script: {ns.script}", file=sys.stderr)
        return 2
    # the collector is off while torch, torch._dynamo and the twin are imported and set up: what
    # they make is frozen before the script starts (`_freeze_setup`), so collections of it would
    # only walk it
    collecting = gc.isenabled()
    gc.disable()
    try:
        status = _with_stack_room(_run, ns, collecting)
    finally:
        if collecting:
            gc.enable()
        from . import _hfimports

        # the hooks left for modules the script never imported (where `main` runs inside another
        # program: a test)
        _hfimports.remove()
    if process:
        _EXIT_STATUS.append(status)
    return status


def _run(ns: argparse.Namespace, collecting: bool) -> int:
    """`main` from the script's check on, with the collector off until the script starts."""
    from . import _codecache, _inspect

    _codecache.install()
    _inspect.install()
    _hide_real_gpus()
    atexit.register(_spare_final_collections)

    from . import _hfimports, _native
    from ._capture import Capture

    _hfimports.install()

    try:
        cap = Capture(gpu=ns.gpu, alloc_conf=ns.alloc_conf)
    except ValueError as e:
        print(f"vramscope run: {e}", file=sys.stderr)
        return 2
    if ns.snapshot or ns.html:
        cap.record_history(True)
    if ns.nproc is not None:
        if ns.nproc < 1:
            print(
                f"vramscope run: --nproc {ns.nproc}: expected a number of processes, 1 or more",
                file=sys.stderr,
            )
            return 2
        if not 0 <= ns.rank < ns.nproc:
            print(
                f"vramscope run: --rank {ns.rank} of --nproc {ns.nproc}: expected 0 <= rank < nproc",
                file=sys.stderr,
            )
            return 2
        from . import _dist

        _dist.setup(cap, ns.nproc, ns.rank)
    else:
        from . import _dist

        _dist.setup_from_script(cap)
    status = 0
    # the script's `__file__` (and its code's file name, which tracebacks print) is the path
    # joined to the working directory, as python gives it (3.9 on); `sys.argv[0]` stays as given
    started_in = os.getcwd()
    script = ns.script if os.path.isabs(ns.script) else os.path.join(started_in, ns.script)
    last_import = _last_leading_import(script)
    saved_argv = sys.argv
    sys.argv = [ns.script, *ns.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(ns.script)))
    freezer = None
    if last_import is not None:
        # installed first, so that the capture's own `__import__` wraps it
        freezer = _FreezeLeadingImports(script, last_import, cap)
        builtins.__import__ = freezer
    try:
        with cap:
            _freeze_setup(collecting)
            # the script's globals live until its end is measured, as in a process
            script_globals = _run_path(script, ns.script)
            cap.mark_end()
            del script_globals
    except SystemExit as e:
        code = e.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
    except BaseException as e:
        _print_uncaught(e, script)
        # python's status for an uncaught exception; 130 (128 + SIGINT) for Ctrl-C, as a shell
        # sees python end on an uncaught KeyboardInterrupt
        status = 130 if isinstance(e, KeyboardInterrupt) else 1
    finally:
        sys.argv = saved_argv
        if freezer is not None:
            freezer.remove()
        # the outputs named on the command line (--json, --snapshot, --html) and the report's source
        # paths are relative to where the user started `vramscope run`, not to where the script
        # moved (a temporary directory it chdir'd into may be gone: blind335/lx01)
        os.chdir(started_in)
    report = cap.report()
    if ns.snapshot:
        with open(ns.snapshot, "wb") as f:
            f.write(cap.device.snapshot_pickle())
    if ns.html:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            snap = os.path.join(tmp, "run.pickle")
            with open(snap, "wb") as f:
                f.write(cap.device.snapshot_pickle())
            # the page alone: `inspect --html` would also print its text report on stdout,
            # which may be `--json -`'s
            try:
                if hasattr(_native, "write_html"):
                    _native.write_html(snap, ns.html, f"run {ns.script}")
                elif _native.main(["inspect", snap, "--html", ns.html]) != 0:
                    # (a native module built before `write_html`: inspect's way, report printed)
                    raise OSError("inspect failed")
            except OSError as e:
                print(f"vramscope run: writing {ns.html} failed: {e}", file=sys.stderr)
    cap.close()
    if ns.json:
        text = json.dumps(report, indent=2) + "\n"
        if ns.json == "-":
            sys.stdout.write(text)
        else:
            with open(ns.json, "w") as f:
                f.write(text)
    if not ns.quiet and ns.json != "-":
        sys.stderr.write(render_text(report))
    del _native
    return status
