"""Warnings at the program's line, as on the GPU.

A warning names the frame its stack level reaches: PyTorch's C++ warnings (`TORCH_WARN`, turned
into `PyErr_WarnEx(..., 1)` by `torch/csrc/Exceptions.cpp`'s PyWarningHandler) the innermost Python
frame, a Python `warnings.warn(..., stacklevel=n)` the n-th frame out. Under the twin the op's call
runs inside the capture's modes, so the innermost frames are the twin's own (`_capture.py`'s
`return func(*args, **kwargs)`) and a stack level counts them: `torch.tensor(t)`'s copy-construct
warning and `F.softmax`'s implicit-dimension one (`_get_softmax_dim`, stacklevel 3) named
vramscope's files where the GPU names the script's line (pytorch/examples gcn: `to_sparse`'s
invariant-check warning). While a capture runs, `warnings._showwarnmsg` (which `_warnings.c` calls
for every warning shown) counts the same stack level over the frames the GPU's process has and
shows the warning there, through the filters and registry of that frame's module."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings

_HERE = os.path.dirname(os.path.abspath(__file__))
_EXAMPLES = os.path.join(_HERE, "examples")
_OVERRIDES = os.path.join(os.path.dirname(os.path.abspath(sys.modules["torch"].__file__)), "overrides.py")


def _twin_file(filename: str) -> bool:
    return filename.startswith(_HERE + os.sep) and not filename.startswith(_EXAMPLES + os.sep)


def _gpu_frames(frames: list) -> list:
    """`frames` (innermost first) without those that only the twin's modes put there: the twin's
    own, and for a torch function written in Python the mode's `handle_torch_function`
    (torch/overrides.py) with the call that reached it (the function's outer entry, whose body the
    mode then runs again as the GPU runs it once)."""
    kept = []
    skip_caller = False
    for i, f in enumerate(frames):
        code = f.f_code
        if skip_caller:
            skip_caller = False
            continue
        if _twin_file(code.co_filename):
            continue
        if (
            code.co_filename == _OVERRIDES
            and code.co_name == "handle_torch_function"
            and i > 0
            and _twin_file(frames[i - 1].f_code.co_filename)
        ):
            skip_caller = True
            continue
        kept.append(f)
    return kept


def relocate(msg, start) -> bool:
    """Show `msg` (a `warnings.WarningMessage` that named a twin frame) at the frame its stack level
    reaches on the GPU, counting from `start`, the innermost frame when it was raised. False where
    the named frame is not on the stack (a warning of `warnings.warn_explicit`'s own place)."""
    frames = []
    f = start
    while f is not None:
        frames.append(f)
        f = f.f_back
    k = next(
        (
            i
            for i, f in enumerate(frames)
            if f.f_code.co_filename == msg.filename and f.f_lineno == msg.lineno
        ),
        None,
    )
    if k is None:
        return False
    named = frames[k]
    level = len(_gpu_frames(frames[:k]))
    gpu = _gpu_frames(frames)
    if level >= len(gpu):
        return False
    # the twin's frame kept the warning in its module's registry ("default": once per place);
    # the program's place decides instead
    registry = named.f_globals.get("__warningregistry__")
    if registry is not None:
        text = str(msg.message)
        registry.pop((text, msg.category, msg.lineno), None)
        registry.pop((text, msg.category, 0), None)
    target = gpu[level]
    g = target.f_globals
    warnings.warn_explicit(
        msg.message,
        msg.category,
        target.f_code.co_filename,
        target.f_lineno,
        module=g.get("__name__", "<string>"),
        registry=g.setdefault("__warningregistry__", {}),
        module_globals=g,
        source=msg.source,
    )
    return True


def install(patch) -> None:
    """Route the warnings shown while `patch` holds (a capture's `_cuda.patch`) through `relocate`."""
    shown = warnings._showwarnmsg

    def _showwarnmsg(msg):
        if _twin_file(msg.filename) and relocate(msg, sys._getframe(1)):
            return
        shown(msg)

    patch.set(warnings, "_showwarnmsg", _showwarnmsg)


#: the filters `quiet` puts in place of the program's: every warning goes to the show function, none
#: raises (the program's "error") and none is entered in a registry (`_warnings.c`'s
#: `warn_explicit` stores a warning's key for every action but "always" and "ignore")
_ALWAYS = [("always", None, Warning, None, 0)]


def _globals_at(msg, start) -> dict:
    """The module globals of the frame `msg` names (its module's name and registry), from `start`
    outwards; a bare module where the frame is not on the stack."""
    f = start
    while f is not None:
        if f.f_code.co_filename == msg.filename and f.f_lineno == msg.lineno:
            return f.f_globals
        f = f.f_back
    return {"__name__": "<string>"}


@contextlib.contextmanager
def quiet(caught: list | None = None):
    """No warning shown while the twin computes values on the host (an op's CPU kernel standing in
    for the GPU's, whose own warnings the op's call on the simulated device gives), none raised
    under the program's "error" filter (the values would be lost), and none kept in a registry.
    With `caught`, each warning a frame outside the twin gave is appended to it with its module's
    globals, for `replay`. The program's filters are swapped out, not changed through
    `catch_warnings`/`simplefilter`: each of those bumps the filters' version, which empties every
    module's registry, so a program's "default" warning in a loop showed on every pass where the
    GPU shows it once (`_warnings.c` reads `warnings.filters` at each warning)."""
    shown, filters = warnings._showwarnmsg, warnings.filters

    def keep(msg):
        if caught is not None and not _twin_file(msg.filename):
            caught.append((msg, _globals_at(msg, sys._getframe(1))))

    warnings.filters = _ALWAYS
    warnings._showwarnmsg = keep
    try:
        yield
    finally:
        warnings.filters = filters
        warnings._showwarnmsg = shown


def replay(caught: list) -> None:
    """The warnings `quiet` caught, given again through the program's filters at their own place
    and that module's registry: shown, or raised under "error", as the GPU's kernel gives them."""
    for msg, g in caught:
        warnings.warn_explicit(
            msg.message,
            msg.category,
            msg.filename,
            msg.lineno,
            module=g.get("__name__", "<string>"),
            registry=g.setdefault("__warningregistry__", {}),
            module_globals=g,
            source=msg.source,
        )
