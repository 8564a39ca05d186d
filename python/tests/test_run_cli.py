"""`vramscope run` as a user meets it: the script's own traceback, `__file__`, `sys.argv` and exit
status, as under plain python, and clear usage errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from vramscope import _run


def _both(script, *args, cwd):
    """(plain python's, `vramscope run --quiet`'s) completed processes of `script` run from `cwd`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    plain = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, cwd=cwd, env=env)
    ours = subprocess.run(
        [sys.executable, "-m", "vramscope", "run", "--quiet", script, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
    )
    return plain, ours


def test_an_uncaught_error_prints_pythons_traceback_and_file_and_argv(tmp_path):
    # the script's frames alone (not `vramscope run`'s nor runpy's), its `__file__` the absolute
    # path python gives it, `sys.argv[0]` the path as given
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data.txt").write_text("7\n")
    (tmp_path / "sub" / "job.py").write_text(
        "import os, sys\n"
        "print(__file__, sys.argv)\n"
        "with open(os.path.join(os.path.dirname(__file__), 'data.txt')) as f:\n"
        "    n = int(f.read())\n"
        "def helper(n):\n"
        "    raise RuntimeError(f'my own error {n}')\n"
        "try:\n"
        "    {}['missing']\n"
        "except KeyError:\n"
        "    helper(n)\n"
    )
    plain, ours = _both(os.path.join("sub", "job.py"), "a1", cwd=tmp_path)
    assert plain.returncode == 1 and "RuntimeError: my own error 7" in plain.stderr
    assert (ours.returncode, ours.stdout, ours.stderr) == (1, plain.stdout, plain.stderr)
    assert plain.stdout.startswith(str(tmp_path / "sub" / "job.py") + " ['sub/job.py', 'a1']")


def test_a_syntax_error_is_printed_as_python_prints_it(tmp_path):
    (tmp_path / "bad.py").write_text("import torch\ndef f(:\n    pass\n")
    plain, ours = _both("bad.py", cwd=tmp_path)
    assert "SyntaxError" in plain.stderr and "Traceback" not in plain.stderr
    assert (ours.returncode, ours.stderr) == (plain.returncode, plain.stderr)


def test_a_pytorch_error_ends_where_the_script_called_pytorch(tmp_path):
    # on the GPU, an op's error is raised by its C++ kernel: the traceback ends at the program's
    # call (here inside F.cross_entropy, run on the host for the reference), with none of the
    # twin's frames (its modes, the meta kernels it calls)
    (tmp_path / "loss.py").write_text(
        "import sys\n"
        "import torch\n"
        "import torch.nn.functional as F\n"
        "dev = sys.argv[1]\n"
        "logits = torch.zeros(3, 4, device=dev)\n"
        "F.cross_entropy(logits, torch.zeros(5, dtype=torch.long, device=dev))\n"
    )
    plain, _ours = _both("loss.py", "cpu", cwd=tmp_path)
    assert "Expected input batch_size (3) to match target batch_size (5)" in plain.stderr
    _plain, on_gpu = _both("loss.py", "cuda", cwd=tmp_path)
    assert (on_gpu.returncode, on_gpu.stderr) == (1, plain.stderr)


def test_an_out_of_memory_error_ends_at_the_scripts_line(tmp_path):
    (tmp_path / "oom.py").write_text(
        "import torch\n"
        "xs = []\n"
        "for _ in range(100):\n"
        "    xs.append(torch.empty(10 << 30, dtype=torch.uint8, device='cuda'))\n"
    )
    _plain, ours = _both("oom.py", cwd=tmp_path)
    assert ours.returncode == 1
    lines = ours.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1] == f'  File "{tmp_path / "oom.py"}", line 4, in <module>'
    assert lines[4].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 10.00 GiB.")
    assert "vramscope" not in ours.stderr


def test_a_script_s_excepthook_gets_its_uncaught_error(tmp_path):
    (tmp_path / "hook.py").write_text(
        "import sys\n"
        "def hook(t, e, tb):\n"
        "    print('hooked', t.__name__, e, tb.tb_frame.f_code.co_filename == __file__)\n"
        "sys.excepthook = hook\n"
        "raise ValueError('x')\n"
    )
    plain, ours = _both("hook.py", cwd=tmp_path)
    assert plain.stdout == "hooked ValueError x True\n"
    assert (ours.returncode, ours.stdout) == (plain.returncode, plain.stdout)


def test_ctrl_c_ends_with_the_status_a_shell_sees_from_python(tmp_path):
    (tmp_path / "ctrl_c.py").write_text("raise KeyboardInterrupt\n")
    _plain, ours = _both("ctrl_c.py", cwd=tmp_path)
    assert ours.returncode == 130
    assert ours.stderr.splitlines()[-1] == "KeyboardInterrupt"


def test_an_error_of_the_twin_s_own_keeps_its_frames():
    # a bug of vramscope's (an exception of no kind PyTorch raises, raised in its own code) keeps
    # the twin's frames, for its report; one PyTorch raises loses them
    def call_the_twin():
        _run.render_text({})

    with pytest.raises(KeyError) as bug:
        call_the_twin()
    frames = _run._frames(bug.value.__traceback__)
    assert _run._without_twin(frames, bug.value) == frames
    torch_like = RuntimeError("CUDA error")
    assert [t.tb_frame.f_code.co_name for t in _run._without_twin(frames, torch_like)] == [
        "test_an_error_of_the_twin_s_own_keeps_its_frames",
        "call_the_twin",
    ]


def test_a_directory_or_no_process_count_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text("print('hi')\n")
    assert _run.main([str(tmp_path / "app")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'app'} is a directory; expected a Python script" in err
    assert str(tmp_path / "app" / "__main__.py") in err
    script = tmp_path / "s.py"
    script.write_text("pass\n")
    assert _run.main(["--nproc", "0", str(script)]) == 2
    assert "--nproc 0: expected a number of processes, 1 or more" in capsys.readouterr().err


def test_a_matrix_product_s_shape_error_is_worded_as_on_the_gpu(tmp_path):
    # mm, addmm (F.linear's, matmul's) and mv raise their structured meta functions' message on the
    # GPU as on the host; the meta device's Python registrations word it otherwise ("a and b must
    # have same reduction dim"), which the twin printed
    (tmp_path / "mm.py").write_text(
        "import sys\n"
        "import torch\n"
        "import torch.nn.functional as F\n"
        "dev = sys.argv[1]\n"
        "r = lambda *s: torch.randn(*s, device=dev)\n"
        "cases = [\n"
        "    lambda: F.linear(r(3, 7), r(4, 8), r(4)),\n"
        "    lambda: F.linear(r(2, 3, 7), r(4, 8)),\n"
        "    lambda: r(3, 7) @ r(8, 4),\n"
        "    lambda: torch.addmm(r(4), r(3, 7), r(8, 4)),\n"
        "    lambda: torch.bmm(r(2, 3, 7), r(2, 8, 4)),\n"
        "    lambda: r(3, 7) @ r(8),\n"
        "    lambda: r(3, 7) @ r(7, 4),\n"
        "]\n"
        "for f in cases:\n"
        "    try:\n"
        "        print(tuple(f().shape))\n"
        "    except RuntimeError as e:\n"
        "        print(e)\n"
    )
    plain, _ours = _both("mm.py", "cpu", cwd=tmp_path)
    assert "mat1 and mat2 shapes cannot be multiplied (6x7 and 8x4)" in plain.stdout, plain.stderr
    _plain, on_gpu = _both("mm.py", "cuda", cwd=tmp_path)
    assert (on_gpu.returncode, on_gpu.stdout) == (0, plain.stdout), on_gpu.stderr


def test_a_pointwise_broadcast_error_is_worded_as_on_the_gpu(tmp_path):
    # TensorIterator's shape check (`infer_size_impl`, ExpandUtils.cpp: "The size of tensor a (4) must
    # match the size of tensor b (1540) at non-singleton dimension 0") words it on the GPU as on the
    # host; the meta device's Python refs (`_broadcast_shapes`) say "Attempting to broadcast a
    # dimension of length ...", which the twin printed (transformers' MoE aux loss of a decode step)
    (tmp_path / "bc.py").write_text(
        "import sys\n"
        "import torch\n"
        "dev = sys.argv[1]\n"
        "r = lambda *s: torch.randn(*s, device=dev)\n"
        "m = lambda *s: torch.rand(*s, device=dev) > 0.5\n"
        "cases = [\n"
        "    lambda: r(4, 64) * r(1540, 1),\n"
        "    lambda: torch.add(r(3, 5), r(4, 5), alpha=2),\n"
        "    lambda: torch.where(m(3, 1), r(4, 5), r(5)),\n"
        "    lambda: torch.addcmul(r(2, 3), r(2, 3), r(4, 3)),\n"
        "    lambda: r(2, 3).masked_fill(m(4, 3), 0.0),\n"
        "    lambda: r(4, 3).mul_(r(5, 3)),\n"
        "    lambda: torch.lerp(r(2, 3), r(4, 3), 0.5),\n"
        "    lambda: r(2, 3, 5) - r(7, 1),\n"
        "    lambda: torch.maximum(r(2, 3), r(4, 3)),\n"
        "    lambda: r(2, 3) == r(4, 3),\n"
        "    lambda: r(2, 3) + r(1, 3),\n"
        "]\n"
        "for f in cases:\n"
        "    try:\n"
        "        print(tuple(f().shape))\n"
        "    except RuntimeError as e:\n"
        "        print(e)\n"
    )
    plain, _ours = _both("bc.py", "cpu", cwd=tmp_path)
    assert "The size of tensor a (4) must match the size of tensor b (1540)" in plain.stdout, plain.stderr
    _plain, on_gpu = _both("bc.py", "cuda", cwd=tmp_path)
    assert (on_gpu.returncode, on_gpu.stdout) == (0, plain.stdout), on_gpu.stderr


def test_a_script_that_leaves_its_working_directory_gets_the_outputs_where_run_was_started(tmp_path):
    # blind335/lx01 chdirs into a TemporaryDirectory that is gone when it ends: the report's source
    # lines (relative to the working directory) raised FileNotFoundError; the outputs named on the
    # command line are paths relative to where `vramscope run` started, as its user typed them
    (tmp_path / "job.py").write_text(
        "import os, tempfile, torch\n"
        "x = torch.ones(1 << 20, device='cuda')\n"
        "with tempfile.TemporaryDirectory() as d:\n"
        "    os.chdir(d)\n"
        "    y = x * 2\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    ours = subprocess.run(
        [sys.executable, "-m", "vramscope", "run", "--json", "out.json", "--snapshot", "s.pickle", "job.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert ours.returncode == 0, ours.stderr
    assert (tmp_path / "out.json").exists() and (tmp_path / "s.pickle").exists()
    assert "  job.py:2 in <module>" in ours.stderr


def test_warnings_name_the_program_s_line_as_on_the_gpu(tmp_path):
    # a C++ warning (TORCH_WARN: the innermost Python frame) and a Python one with a stack level
    # (F.softmax's, stacklevel 3) named the twin's `return func(*args, **kwargs)`; once per line
    # under the default filter, as the program's registry keeps them
    (tmp_path / "warns.py").write_text(
        "import warnings, torch\n"
        "dev = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "x = torch.ones(2, device=dev)\n"
        "for _ in range(2):\n"
        "    y = torch.tensor(x)\n"
        "z = torch.tensor(x)\n"
        "w = torch.nn.functional.softmax(torch.ones(2, 3, device=dev))\n"
        "with warnings.catch_warnings(record=True) as rec:\n"
        "    warnings.simplefilter('always')\n"
        "    torch.tensor(x)\n"
        "print([(r.filename, r.lineno) for r in rec])\n"
    )
    plain, ours = _both("warns.py", cwd=tmp_path)
    assert plain.returncode == 0 and plain.stderr.count("UserWarning") == 3
    assert (ours.returncode, ours.stdout, ours.stderr) == (0, plain.stdout, plain.stderr)


@pytest.mark.parametrize("action", ["default", "error"])
def test_a_program_s_own_kernel_s_warning_shows_or_raises_as_on_the_gpu(tmp_path, action):
    # the twin computes a Python kernel's values on the host, inside `_warnloc.quiet`: its warning
    # is its CUDA kernel's on the GPU, shown once under "default" and raised under "error" (where
    # the host's run raised and its values were lost: zeros)
    (tmp_path / "kernel.py").write_text(
        "import sys, warnings, torch\n"
        "warnings.simplefilter(sys.argv[1])\n"
        "dev = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "lib = torch.library.Library('rvwarn', 'DEF')\n"
        "lib.define('scaled(Tensor x) -> Tensor')\n"
        "def scaled(x):\n"
        "    warnings.warn('scaling by 2')\n"
        "    return x * 2\n"
        "lib.impl('scaled', scaled, 'CPU')\n"
        "lib.impl('scaled', scaled, 'CUDA')\n"
        "lib.impl('scaled', lambda x: torch.empty_like(x), 'Meta')\n"
        "x = torch.arange(4.0, device=dev)\n"
        "for i in range(2):\n"
        "    try:\n"
        "        print(i, torch.ops.rvwarn.scaled(x).tolist())\n"
        "    except UserWarning as e:\n"
        "        print(i, 'raised', e)\n"
    )
    plain, ours = _both("kernel.py", action, cwd=tmp_path)
    assert plain.returncode == 0 and ours.returncode == 0, ours.stderr
    assert ours.stdout == plain.stdout
    assert ours.stderr.count("UserWarning: scaling by 2") == plain.stderr.count("UserWarning: scaling by 2")


def test_the_twin_s_own_warnings_do_not_raise_under_the_program_s_error_filter(tmp_path):
    # a rank outside the script's `spawn` runs nothing: the twin says so on stderr, not as a
    # warning that the program's "error" filter turns into an exception
    (tmp_path / "spawn.py").write_text(
        "import warnings, torch.multiprocessing as mp\n"
        "warnings.simplefilter('error')\n"
        "def fn(i):\n"
        "    print('rank', i)\n"
        "mp.spawn(fn, nprocs=2)\n"
        "print('done')\n"
    )
    ours = subprocess.run(
        [sys.executable, "-m", "vramscope", "run", "--quiet", "--nproc", "4", "--rank", "3", "spawn.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == "done\n"
    assert "rank 3 not among them: none ran" in ours.stderr
