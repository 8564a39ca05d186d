"""Sessions 65-66's kernel probes (validation/run/probes/au65_*, kd65_*, pa66_ctc_*) as the H100 ran
them (fixtures/run/probes/*_h100.txt), run under the twin line for line."""

import runpy
import sys

import pytest
import vramscope
from conftest import FIXTURES, ROOT

PROBES = ROOT / "validation" / "run" / "probes"


@pytest.mark.parametrize(
    "probe, gpu",
    [
        # weight norm's bfloat16 norms in float32 (WeightNorm.cu), a transposed rfft's cuFFT work area
        ("au65_kernel_copies_probe_s65.py", "au65_kernel_copies_probe_s65_h100.txt"),
        ("kd65_kernel_copies_and_buffers_probe_s65.py", "kd65_kernel_copies_and_buffers_probe_s65_h100.txt"),
        # cuDNN's CTC workspaces; cuFFT's work area for a batch-inner strided rfft (signal bytes >= 8 KiB)
        (
            "pa66_ctc_workspace_and_strided_rfft_probe.py",
            "pa66_ctc_workspace_and_strided_rfft_probe_s66_h100.txt",
        ),
    ],
)
def test_kernel_probe_as_the_h100_ran_it(probe, gpu, capsys, monkeypatch):
    monkeypatch.setattr(sys, "path", [str(PROBES), *sys.path])  # the probes import _op_case beside them
    with vramscope.capture(gpu="h100"):
        runpy.run_path(str(PROBES / probe), run_name="__main__")
    twin = capsys.readouterr().out.splitlines()
    assert twin == (FIXTURES / "run" / "probes" / gpu).read_text().splitlines()
