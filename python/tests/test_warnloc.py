"""`_warnloc.quiet` and `replay`: the host's value computation neither shows, raises nor registers a
warning; the program's own kernel's warnings are given again through the program's filters."""

from __future__ import annotations

import warnings

import torch  # noqa: F401  (_warnloc reads torch's place at its import)
from vramscope import _warnloc


def _warn():
    warnings.warn("from the kernel", stacklevel=1)


def test_quiet_raises_nothing_under_the_program_s_error_filter_and_registers_nothing():
    registry = globals().setdefault("__warningregistry__", {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        before = warnings.filters
        with _warnloc.quiet():
            _warn()
        assert warnings.filters is before
        assert not [k for k in registry if k != "version"]
        try:
            _warn()
        except UserWarning:
            pass
        else:
            raise AssertionError("the program's filter is back after quiet")


def test_replay_gives_the_caught_warnings_through_the_program_s_filters():
    caught: list = []
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with _warnloc.quiet(caught):
            _warn()
        assert rec == [] and len(caught) == 1
        _warnloc.replay(caught)
    assert [(str(r.message), r.filename, r.lineno) for r in rec] == [
        ("from the kernel", __file__, _warn.__code__.co_firstlineno + 1)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            _warnloc.replay(caught)
        except UserWarning:
            pass
        else:
            raise AssertionError("raised under error, as the kernel's own warning")
