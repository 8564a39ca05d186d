"""Functions run once a module has been imported (`vramscope._importhook`), and the capture's
patches applied that way (`_cuda._Patch.when_imported`)."""

from __future__ import annotations

import importlib
import sys

from vramscope import _importhook
from vramscope._cuda import _Patch


def _module(tmp_path, monkeypatch, name: str):
    (tmp_path / f"{name}.py").write_text("VALUE = 1\n\ndef read():\n    return VALUE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.invalidate_caches()


def test_a_hook_runs_once_after_the_module_and_leaves_its_loader(tmp_path, monkeypatch):
    _module(tmp_path, monkeypatch, "hooked_mod")
    seen = []
    _importhook.after_import("hooked_mod", lambda m: seen.append(m.read()))
    import hooked_mod

    assert seen == [1]
    assert type(hooked_mod.__loader__).__name__ == "SourceFileLoader"
    assert hooked_mod.__spec__.loader is hooked_mod.__loader__
    assert _importhook._FINDER not in sys.meta_path  # no hook left


def test_a_cancelled_hook_does_not_run(tmp_path, monkeypatch):
    _module(tmp_path, monkeypatch, "cancelled_mod")
    seen = []

    def hook(m):
        seen.append(m)

    _importhook.after_import("cancelled_mod", hook)
    _importhook.cancel("cancelled_mod", hook)
    import cancelled_mod  # noqa: F401

    assert seen == []
    assert _importhook._FINDER not in sys.meta_path


def test_a_patch_set_at_import_is_restored_and_an_unrun_one_forgotten(tmp_path, monkeypatch):
    _module(tmp_path, monkeypatch, "patched_mod")
    p = _Patch()
    p.when_imported("patched_mod", lambda m: p.set(m, "VALUE", 2))
    p.when_imported("never_imported_mod", lambda m: p.set(m, "VALUE", 3))
    import patched_mod

    assert patched_mod.read() == 2
    p.restore()
    assert patched_mod.read() == 1
    assert "never_imported_mod" not in _importhook._HOOKS
    # where the module is imported already, the patch is applied at once
    p.when_imported("patched_mod", lambda m: p.set(m, "VALUE", 4))
    assert patched_mod.read() == 4
    p.restore()
    assert patched_mod.read() == 1


def test_around_import_runs_the_module_inside_its_function(tmp_path, monkeypatch):
    _module(tmp_path, monkeypatch, "around_mod")
    seen = []

    def around(module, run):
        seen.append(("before", hasattr(module, "VALUE")))
        run()
        seen.append(("after", module.VALUE))

    _importhook.around_import("around_mod", around)
    import around_mod  # noqa: F401

    assert seen == [("before", False), ("after", 1)]
    assert "around_mod" not in _importhook._AROUND
    assert _importhook._FINDER not in sys.meta_path
