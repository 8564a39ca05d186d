"""What `vramscope run` does to start cheaper gives what Python gives: the frame that reserves
stack room (`_run._with_stack_room`), the compiled-code cache of `dataclasses`
(`vramscope._codecache`) and the cheaper answers to torch's `inspect` questions
(`vramscope._inspect`)."""

from __future__ import annotations

import builtins
import dataclasses
import inspect
import os
import sys
import types

import pytest
from vramscope import _codecache, _inspect, _run


def test_the_stack_room_frame_passes_calls_through():
    assert _run._with_stack_room.__code__.co_stacksize >= _run.STACK_ROOM

    def depth(n):
        return 0 if n == 0 else 1 + depth(n - 1)

    # frames below it: as deep as the recursion limit allows, as anywhere
    assert _run._with_stack_room(depth, 800) == 800
    with pytest.raises(ZeroDivisionError):
        _run._with_stack_room(lambda: 1 / 0)


def _point_class():
    @dataclasses.dataclass(order=True)
    class Point:
        x: int
        y: int = 2

    return Point


def test_dataclasses_compile_through_the_cache_as_without_it(tmp_path, monkeypatch):
    plain = _point_class()
    path = str(tmp_path / "codes.marshal")
    cache = _codecache.CodeCache(path)
    monkeypatch.setattr(dataclasses, "exec", cache.exec, raising=False)
    cached = _point_class()
    assert cache.compiled > 0 and len(cache.codes) == cache.compiled
    for name in ("__init__", "__repr__", "__eq__", "__lt__"):
        assert getattr(cached, name).__code__ == getattr(plain, name).__code__, name
    assert repr(cached(1)) == repr(plain(1)) and cached(1) < cached(1, 3)

    # stored, read back by the next process, and not compiled again
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    cache.save()
    again = _codecache.CodeCache(path)
    assert set(again.stored) == set(cache.codes) and not again.codes
    monkeypatch.setattr(dataclasses, "exec", again.exec, raising=False)
    reread = _point_class()
    assert again.compiled == 0 and again.codes == cache.codes
    assert reread.__init__.__code__ == plain.__init__.__code__
    # a text of its own is compiled, and stored beside the file's
    again.exec("y = 2", {})
    again.save()
    flags = sys._getframe().f_code.co_flags & _codecache._FUTURE_FLAGS  # this file's annotations
    assert set(_codecache.CodeCache(path).stored) == set(cache.codes) | {(flags, "y = 2")}


def test_nothing_is_written_where_python_writes_no_bytecode(tmp_path, monkeypatch):
    path = tmp_path / "codes.marshal"
    cache = _codecache.CodeCache(str(path))
    cache.exec("x = 1", {})
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    cache.save()
    assert not path.exists()
    # a file of another interpreter, or not a cache, is compiled around
    path.write_bytes(b"not marshal")
    assert _codecache.CodeCache(str(path)).codes == {}


def test_the_callers_future_flags_are_the_compilers(tmp_path):
    cache = _codecache.CodeCache(str(tmp_path / "codes.marshal"))
    text = "def f(x: int) -> None:\n    pass\n"
    future = compile(
        "from __future__ import annotations\ndef run(ex, text, ns):\n    ex(text, {}, ns)\n",
        "<future>",
        "exec",
        dont_inherit=True,
    )
    plain = compile("def run(ex, text, ns):\n    ex(text, {}, ns)\n", "<plain>", "exec", dont_inherit=True)
    for module, wanted in (
        (future, {"x": "int", "return": "None"}),
        (plain, {"x": int, "return": None}),
    ):
        scope: dict = {}
        builtins.exec(module, scope)
        expected: dict = {}
        scope["run"](builtins.exec, text, expected)
        ours: dict = {}
        scope["run"](cache.exec, text, ours)
        assert ours["f"].__annotations__ == expected["f"].__annotations__ == wanted
    assert cache.compiled == 2  # one text, two sets of flags


def test_realpath_resolves_as_posixpath_does(tmp_path):
    if os.path is not __import__("posixpath"):
        pytest.skip("POSIX paths only")
    real = tmp_path / "real" / "pkg"
    real.mkdir(parents=True)
    (real / "mod.py").write_text("")
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    (real / "alias.py").symlink_to(real / "mod.py")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    paths = [
        tmp_path / "real" / "pkg" / "mod.py",
        tmp_path / "linked" / "pkg" / "mod.py",
        tmp_path / "linked" / "pkg" / "alias.py",
        tmp_path / "linked" / "pkg" / "missing.py",
        tmp_path / "loop" / "x.py",
        tmp_path / "loop",
    ]
    resolved: dict = {}
    for path in paths + paths:
        assert _inspect._realpath(str(path), resolved) == os.path.realpath(path), path


def _mapped(getmodule, frame, monkeypatch):
    """inspect's two caches after `getmodule(frame)`, from empty caches."""
    monkeypatch.setattr(inspect, "modulesbyfile", {})
    monkeypatch.setattr(inspect, "_filesbymodname", {})
    found = getmodule(frame)
    return found, list(inspect.modulesbyfile.items()), list(inspect._filesbymodname.items())


def test_getmodule_maps_the_modules_as_inspect_does(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.py").write_text("")
    (tmp_path / "linked").symlink_to(real)
    # two modules whose files are one file through a link: the later one's name wins both keys
    for name, folder in (("vs_test_a", "real"), ("vs_test_b", "linked")):
        module = types.ModuleType(name)
        module.__file__ = str(tmp_path / folder / "a.py")
        monkeypatch.setitem(sys.modules, name, module)
    frame = sys._getframe()
    ours = _mapped(_inspect.getmodule, frame, monkeypatch)
    theirs = _mapped(_inspect._ORIGINAL, frame, monkeypatch)
    assert ours == theirs
    assert ours[0] is sys.modules[__name__]
    assert dict(ours[1])[str(real / "a.py")] == "vs_test_b"


def test_get_source_names_the_callers_file_and_line():
    utils = pytest.importorskip("torch._library.utils")

    def both():
        return _inspect.get_source(1), utils.get_source(1)

    ours, theirs = both()
    assert ours == theirs and ours.startswith(__file__ + ":")
    # a get_source other than torch 2.11's is left as it is
    other = types.SimpleNamespace(get_source=lambda stacklevel: "elsewhere")
    _inspect._patch_get_source(other)
    assert other.get_source(1) == "elsewhere"


def test_an_output_option_that_took_the_script_says_so(capsys):
    # `--json FILE` followed by nothing else: argparse gives the script's path to --json
    from vramscope import _run

    assert _run.main(["--json", "train.py"]) == 2
    err = capsys.readouterr().err
    assert "--json takes a FILE to write, and it took 'train.py'" in err
    assert "vramscope run --json - train.py" in err
    assert _run.main(["--snapshot", "train.py"]) == 2
    assert "vramscope run --snapshot run.snapshot train.py" in capsys.readouterr().err
    assert _run.main([]) == 2
    assert "give a script to run (or --example)" in capsys.readouterr().err


def test_help_run_is_runs_help_and_the_top_level_help_lists_run(capfd):
    # `run`'s options are `_run.parse`'s alone; the Rust command line's help lists `run`
    from vramscope.__main__ import main

    with pytest.raises(SystemExit) as e:
        main(["help", "run"])
    assert e.value.code == 0
    out = capfd.readouterr().out
    assert out.startswith("usage: vramscope run") and "--nproc N" in out
    assert main(["--help"]) == 0
    listed = capfd.readouterr().out
    assert any(line.split()[:1] == ["run"] for line in listed.splitlines()), listed
