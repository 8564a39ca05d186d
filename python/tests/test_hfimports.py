"""The disk cache of transformers' import structure (`vramscope._hfimports`)."""

from __future__ import annotations

import builtins
import importlib.util
import os
import sys

import pytest
from conftest import run_script
from vramscope import _hfimports

#: `import_utils.py`'s stamp (size, modification and change times, inode), as `cached` takes it
STAMP = (1, 0, 0, 1)
OTHER = (2, 0, 0, 1)


def _ordered(x):
    """A value with its dicts' key order made visible (sets compare as sets)."""
    if isinstance(x, dict):
        return [(k, _ordered(v)) for k, v in x.items()]
    return x


@pytest.fixture
def compute(monkeypatch, tmp_path):
    """transformers' own computation, with the cache under a temporary folder."""
    iu = pytest.importorskip("transformers.utils.import_utils")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def fresh(*args):
        # transformers' own in-process cache of each folder would serve files as first read
        iu.create_import_structure_from_path.cache_clear()
        return iu.define_import_structure.__wrapped__(*args)

    return fresh


def test_the_models_folder_comes_back_as_computed(compute):
    import transformers

    models = os.path.join(os.path.dirname(transformers.__file__), "models")
    want = compute(models, "models")
    for _ in range(2):  # computed and stored, then read back
        got = _hfimports.cached(compute, STAMP, models, "models")
        assert got == want and _ordered(got) == _ordered(want)
    assert len(os.listdir(_hfimports.cache_dir())) == 1


def test_a_changed_file_or_code_stamp_is_computed_again(compute, tmp_path, monkeypatch):
    # files just written count as settled (each write below changes the size, so the stamps
    # differ even within one tick of the file system's clock)
    monkeypatch.setattr(_hfimports, "SETTLED_NS", -(10**10))
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "modeling_a.py").write_text('__all__ = ["A"]\n')
    init = str(pkg / "__init__.py")

    def names():
        return {
            n for mods in _hfimports.cached(compute, STAMP, init).values() for v in mods.values() for n in v
        }

    assert names() == {"A"}
    (pkg / "sub" / "modeling_a.py").write_text('__all__ = ["BB"]\n')
    assert names() == {"BB"}
    (pkg / "sub" / "modeling_c.py").write_text('__all__ = ["C"]\n')
    assert names() == {"BB", "C"}
    assert len(os.listdir(_hfimports.cache_dir())) == 1
    # a cache file written by other code is not read: the stamp names the file
    assert _hfimports.cached(lambda *_: "other", OTHER, init) == "other"


def test_files_written_just_now_are_not_stored(compute, tmp_path):
    # a file changed again within the same clock tick could keep its stamp
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "modeling_a.py").write_text('__all__ = ["A"]\n')
    assert _hfimports.cached(compute, STAMP, str(pkg)) == compute(str(pkg))
    assert not os.path.exists(_hfimports.cache_dir())


def test_a_result_from_an_in_process_cache_is_not_stored(compute, tmp_path, monkeypatch):
    monkeypatch.setattr(_hfimports, "SETTLED_NS", -(10**10))
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "modeling_a.py").write_text('__all__ = ["A"]\n')
    count = iter(range(10))
    assert _hfimports.cached(compute, STAMP, str(pkg), hits=lambda: next(count)) == compute(str(pkg))
    assert not os.path.exists(_hfimports.cache_dir())


def test_an_unwritable_cache_falls_back_to_the_computation(compute, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # not a folder
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "modeling_a.py").write_text('__all__ = ["A"]\n')
    assert _hfimports.cached(compute, STAMP, str(pkg)) == compute(str(pkg))


def test_vramscope_run_serves_transformers_from_the_cache(tmp_script, tmp_path):
    pytest.importorskip("transformers")
    script = tmp_script(
        "import transformers\n"
        "from transformers import LlamaConfig\n"
        "import transformers.utils.import_utils as iu\n"
        "print(type(iu.__loader__).__name__, LlamaConfig.__name__)\n"
    )
    cache = tmp_path / "cache"
    status, lines, _report, err = run_script(script, env={"XDG_CACHE_HOME": str(cache)})
    assert status == 0, err
    assert lines == ["SourceFileLoader LlamaConfig"]
    assert len(os.listdir(cache / "vramscope" / "transformers")) >= 2


def _heavy_library(root, name: str) -> None:
    """A package `name` whose `metrics` module counts its imports in `os.environ`."""
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "metrics.py").write_text(
        "import os\n"
        f"os.environ['{name.upper()}_IMPORTS'] = str(int(os.environ.get('{name.upper()}_IMPORTS', 0)) + 1)\n"
        "def roc_curve(*args):\n"
        "    return ('roc', args)\n"
        "def other():\n"
        "    return 'other'\n"
    )


def _deferring(tmp_path, monkeypatch, library: str, importer: str, source: str) -> None:
    """`_heavy_library(library)` and a module `importer` (`source`) on a fresh path, neither
    imported yet, with `DEFERRED` naming `library.metrics`' `roc_curve` for the importer."""
    _heavy_library(tmp_path, library)
    (tmp_path / f"{importer}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in (importer, library, f"{library}.metrics"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.delenv(f"{library.upper()}_IMPORTS", raising=False)
    monkeypatch.setattr(_hfimports, "DEFERRED", {importer: (f"{library}.metrics", ("roc_curve",))})


def test_a_deferred_name_imports_its_library_at_the_first_call(tmp_path, monkeypatch):
    from vramscope import _importhook

    _deferring(
        tmp_path,
        monkeypatch,
        "heavylib_sp",
        "importer_sp",
        "import json\nfrom heavylib_sp.metrics import roc_curve\n"
        "def use(*args):\n    return roc_curve(*args)\n",
    )
    _importhook.around_import("importer_sp", _hfimports._defer)
    real_import = builtins.__import__
    import importer_sp

    assert builtins.__import__ is real_import
    assert "heavylib_sp.metrics" not in sys.modules
    assert importer_sp.json is sys.modules["json"]  # any other import is the import's own
    assert importer_sp.use(1, 2) == ("roc", (1, 2))
    import heavylib_sp.metrics

    assert importer_sp.roc_curve is heavylib_sp.metrics.roc_curve
    assert importer_sp.use(3) == ("roc", (3,))
    assert os.environ["HEAVYLIB_SP_IMPORTS"] == "1"


def test_a_library_imported_already_or_other_names_are_not_deferred(tmp_path, monkeypatch):
    from vramscope import _importhook

    _deferring(
        tmp_path,
        monkeypatch,
        "heavylib2_sp",
        "importer2_sp",
        "from heavylib2_sp.metrics import roc_curve, other\n",
    )
    _importhook.around_import("importer2_sp", _hfimports._defer)
    import importer2_sp  # `other` is not DEFERRED's: the statement imports the library

    assert importer2_sp.roc_curve is sys.modules["heavylib2_sp.metrics"].roc_curve


def test_vramscope_run_defers_sklearn_in_transformers(tmp_script, tmp_path):
    # transformers' generation/candidate_generator.py: `if is_sklearn_available(): from
    # sklearn.metrics import roc_curve`, run by every model class's import
    pytest.importorskip("transformers")
    if importlib.util.find_spec("sklearn") is None:
        _heavy_library(tmp_path, "sklearn")
    script = tmp_script(
        "import os, sys\n"
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        "import transformers.generation.candidate_generator as cg\n"
        "print('sklearn.metrics' in sys.modules, cg.roc_curve.__name__)\n"
    )
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    status, lines, _report, err = run_script(script, env={"PYTHONPATH": path})
    assert status == 0, err
    assert lines == ["False roc_curve"]


def test_vramscope_run_leaves_no_deferral_hooks_behind(tmp_path):
    from vramscope import _importhook, _run

    script = tmp_path / "script.py"
    script.write_text("pass\n")
    assert _run.main(["--nproc", "0", str(script)]) == 2  # returns before the script runs
    assert not set(_hfimports.DEFERRED) & set(_importhook._AROUND)


def _distribution(site, name: str, package: str) -> None:
    """A distribution `name` installed in `site` with one package `package` (no top_level.txt:
    its packages are read from its RECORD)."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "RECORD").write_text(f"{package}/__init__.py,,\n{info.name}/METADATA,,\n")
    (site / package).mkdir()
    (site / package / "__init__.py").write_text("")


def test_the_distributions_come_back_as_computed_until_one_comes(tmp_path, monkeypatch):
    import importlib.metadata

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(_hfimports, "SETTLED_NS", -(10**10))
    site = tmp_path / "site"
    site.mkdir()
    _distribution(site, "fakedist-sp", "fakepkg_sp")
    monkeypatch.syspath_prepend(str(site))
    calls = []

    def compute():
        calls.append(1)
        return importlib.metadata.packages_distributions()

    want = importlib.metadata.packages_distributions()
    assert want["fakepkg_sp"] == ["fakedist-sp"]
    for _ in range(2):  # computed and stored, then read back
        got = _hfimports.kept_distributions(compute)
        assert got == want and list(got) == list(want)
    assert len(calls) == 1
    _distribution(site, "otherdist-sp", "otherpkg_sp")
    importlib.invalidate_caches()
    assert _hfimports.kept_distributions(compute)["otherpkg_sp"] == ["otherdist-sp"]
    assert len(calls) == 2


def test_vramscope_run_gives_transformers_the_distributions(tmp_script):
    pytest.importorskip("transformers")
    script = tmp_script(
        "import importlib.metadata\n"
        "from transformers.utils import import_utils\n"
        "print(import_utils.PACKAGE_DISTRIBUTION_MAPPING == importlib.metadata.packages_distributions())\n"
        "print(importlib.metadata.packages_distributions.__module__)\n"
    )
    for _ in range(2):
        status, lines, _report, err = run_script(script)
        assert status == 0, err
        assert lines == ["True", "importlib.metadata"]


def test_the_distributions_are_computed_where_another_finder_finds_distributions(tmp_path, monkeypatch):
    # a `sys.meta_path` finder of distributions besides PathFinder (an import hook serving packages
    # from elsewhere) adds to what `packages_distributions` reads beyond the listing: no cache
    import importlib.metadata

    class Extra:
        def find_spec(self, *args):
            return None

        def find_distributions(self, *args):
            return iter(())

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(_hfimports, "SETTLED_NS", -(10**10))
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Extra()])
    calls = []

    def compute():
        calls.append(1)
        return importlib.metadata.packages_distributions()

    for _ in range(2):
        _hfimports.kept_distributions(compute)
    assert len(calls) == 2
    assert not (tmp_path / "cache").exists()


def test_a_library_the_program_imported_first_is_bound_as_it_is(tmp_path, monkeypatch):
    # a script that imports sklearn before transformers: candidate_generator's `roc_curve` is
    # sklearn's own function, as without `vramscope run`
    from vramscope import _importhook

    _deferring(
        tmp_path, monkeypatch, "heavylib3_sp", "importer3_sp", "from heavylib3_sp.metrics import roc_curve\n"
    )
    import heavylib3_sp.metrics

    _importhook.around_import("importer3_sp", _hfimports._defer)
    import importer3_sp

    assert importer3_sp.roc_curve is heavylib3_sp.metrics.roc_curve
    assert os.environ["HEAVYLIB3_SP_IMPORTS"] == "1"
