"""The caching allocator's garbage collection (`garbage_collection_threshold` under a memory
fraction, with `max_split_size_mb`) against a real H100 history: blind333/lv01's
(fixtures/run/history_lv01_s74_h100.pickle.xz, session 74), replayed at the GPU's own addresses."""

from __future__ import annotations

import lzma
import os
import subprocess
import sys

import pytest

HISTORY = os.path.join(
    os.path.dirname(__file__), "..", "..", "fixtures", "run", "history_lv01_s74_h100.pickle.xz"
)


def _replay(path, *options):
    return subprocess.run(
        [sys.executable, "-m", "vramscope", "replay", *options, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    path = tmp_path_factory.mktemp("lv01") / "history.pickle"
    with lzma.open(HISTORY, "rb") as src:
        path.write_bytes(src.read())
    return path


def test_lv01s_collections_free_the_segments_the_h100_freed(history):
    # `set_per_process_memory_fraction(0.1)` arms `garbage_collect_cached_blocks` at every new
    # segment: 929 segment allocations and frees, among them those of the collections (five 36 MiB
    # segments of one step, not four), each at the H100's address
    out = _replay(history, "--memory-fraction", "0.1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "929/929 reproduced" in out.stdout, out.stdout
    assert "EXACT" in out.stdout, out.stdout


def test_without_the_fraction_no_collection_runs_and_the_replay_diverges(history):
    # the threshold acts only under a fraction (`set_fraction`): without it the cached blocks stay
    # and the twin makes a segment where the H100 freed one
    out = _replay(history)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "DIVERGED" in out.stdout, out.stdout
