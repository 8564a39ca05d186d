"""The cuDNN convolution sweep (validation/run/conv_sweep.py) and the measured table it fed
(crates/engine/src/ops/cudnn_conv_problems.txt.xz, fixtures/run/conv_sweep_h200.tar.xz)."""

from __future__ import annotations

import json
import sys
import tarfile

import pytest
from conftest import FIXTURES, ROOT

sys.path.insert(0, str(ROOT / "validation" / "run"))

import conv_sweep
import conv_table

TABLE = ROOT / "crates" / "engine" / "src" / "ops" / "cudnn_conv_problems.txt.xz"


def _lines(path):
    return conv_sweep.read_table(path)[1]


def _extract(tmp_path, archive, endings):
    """The members of a sweep archive whose names end in one of `endings`, under tmp_path."""
    with tarfile.open(FIXTURES / "run" / archive) as tar:
        names = [m for m in tar.getmembers() if m.name.endswith(endings)]
        tar.extractall(tmp_path, members=names, filter="data")


def _swept_and_in_the_table(d):
    """conv_table.py's problems of a sweep's records in d (direct and autocast), each checked
    against the table's bytes."""
    table = _lines(TABLE)
    swept = conv_table.read(str(d), str(d))
    auto = conv_table.read(str(d / "autocast"), str(d / "autocast")) if (d / "autocast").exists() else {}
    assert all(table[key] == b for key, b in swept.items())
    assert all(table[key] == b for key, b in auto.items())
    return table, swept, auto


def test_the_table_holds_the_problems_of_the_sweeps_first_worker(tmp_path):
    # worker 0's records (1 item in 14; reading all 14 takes too long for a unit test)
    _extract(tmp_path, "conv_sweep_h200.tar.xz", ("/w0.jsonl", "autocast/w4.jsonl"))
    # the 17 lines the validation scripts' records had given otherwise (misread: issue #31) were
    # corrected to the sweep's bytes (fixtures/run/README.md); the autocast path reads the same
    # problems as the direct calls
    table, swept, auto = _swept_and_in_the_table(tmp_path / "conv_sweep")
    assert len(swept) == 3666 and auto
    one = "forward bfloat16 nchw 0 64,30,1,1 120,30,1,1 1,1 0,0 1,1 0,0 1"
    assert (table[one], swept[one]) == (61696, 61696)


def test_the_table_holds_the_second_sweeps_problems_and_the_sweeps_do_not_overlap(tmp_path):
    # worker 0 of the second sweep's second call (1 item in 16) and every worker's summary
    _extract(
        tmp_path, "conv_sweep2_h200.tar.xz", (".err", "conv_sweep3/w0.jsonl", "conv_sweep3/autocast/w0.jsonl")
    )
    _extract(tmp_path, "conv_sweep_h200.tar.xz", (".err", "problems.json"))
    _, swept, auto = _swept_and_in_the_table(tmp_path / "conv_sweep3")
    assert (len(swept), len(auto)) == (3087, 21)
    # the three calls reached 100,959 of the 109,326 items, none twice
    n = len(conv_sweep.items(json.load(open(tmp_path / "conv_sweep" / "problems.json"))))
    first = conv_sweep.reached([str(tmp_path / "conv_sweep")], n)
    second = conv_sweep.reached([str(tmp_path / "conv_sweep2"), str(tmp_path / "conv_sweep3")], n)
    assert (n, len(first), len(second), len(first & second)) == (109326, 19472, 81487, 0)


def test_merge_adds_new_lines_and_keeps_the_tables_bytes(tmp_path, capsys):
    table = tmp_path / "t.txt"
    table.write_text("# header\nforward float32 nchw 0 3,32 4,3,3 1 0 1 0 1 | 8:100 16:0\n")
    sweep = tmp_path / "s.txt"
    sweep.write_text(
        "forward float32 nchw 0 8,3,32 4,3,3 1 0 1 0 1 200\n"
        "forward float32 nchw 0 16,3,32 4,3,3 1 0 1 0 1 0\n"
        "forward float32 nchw 0 2,3,32 4,3,3 1 0 1 0 1 7\n"
        "dgrad float32 nchw 0 8,3,32 4,3,3 1 0 1 0 1 5\n"
    )
    out = conv_sweep.merge(str(table), str(sweep))
    assert out == [
        "# header",
        "dgrad float32 nchw 0 3,32 4,3,3 1 0 1 0 1 | 8:5",
        "forward float32 nchw 0 3,32 4,3,3 1 0 1 0 1 | 2:7 8:100 16:0",
    ]
    err = capsys.readouterr().err
    assert "conflict: forward float32 nchw 0 8,3,32 4,3,3 1 0 1 0 1: table 100, sweep 200" in err
    assert "2 new from the sweep, 1 agreeing, 1 conflicting" in err
    # the table's format reads back as the problems it holds
    merged = tmp_path / "m.txt"
    merged.write_text("\n".join(out) + "\n")
    assert conv_sweep.read_table(str(merged))[1] == {
        "dgrad float32 nchw 0 8,3,32 4,3,3 1 0 1 0 1": 5,
        "forward float32 nchw 0 2,3,32 4,3,3 1 0 1 0 1": 7,
        "forward float32 nchw 0 8,3,32 4,3,3 1 0 1 0 1": 100,
        "forward float32 nchw 0 16,3,32 4,3,3 1 0 1 0 1": 0,
    }
    with pytest.raises(ValueError, match="not a convolution problem's key"):
        conv_sweep.split_key("wgrad x")


def test_a_run_leaves_out_what_earlier_runs_reached(tmp_path):
    # session 17's summaries (no `reached`: every WORKERS-th item from WORKER on) and a later run's
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    (old / "w0.err").write_text('{"worker": 0, "done": 2, "skipped": 1, "todo": 5}\n')
    (old / "w1.err").write_text(
        '{"item": {}, "error": "x"}\n{"worker": 1, "done": 1, "skipped": 0, "todo": 5}\n'
    )
    assert conv_sweep.reached([str(old)], 10) == {0, 2, 4, 1}
    (new / "w0.err").write_text('{"worker": 0, "done": 2, "skipped": 0, "todo": 3, "reached": [3, 7]}\n')
    assert conv_sweep.reached([str(old), str(new)], 10) == {0, 1, 2, 3, 4, 7}
    (new / "w1.err").write_text('{"item": {}, "error": "x"}\n')
    with pytest.raises(SystemExit, match="no summary line"):
        conv_sweep.reached([str(new)], 10)


def test_leave_one_out_counts_an_engine_switch_as_a_miss(capsys):
    line = {n: 1000 + 16 * n for n in (1, 2, 4, 8, 16)}
    hit, misses = conv_sweep.loo("affine", {"p": line}, strict=False)
    assert (hit, misses) == (3, [])
    # a batch whose plan differs (a multiple of 4 takes no workspace, as on the H100's sweeps): batches
    # 2, 3, 5 and 6 lie on one line, and the rule predicts 64 bytes for batch 4
    switch = {n: 0 if n % 4 == 0 else 16 * n for n in range(1, 10)}
    hit, misses = conv_sweep.loo("switch", {"p": switch}, strict=True)
    assert (hit, misses) == (0, [(64, "p", 4, 0, 64)])
    assert "1 missed" in capsys.readouterr().out


def test_items_put_common_batches_dtypes_and_tier_0_first():
    p2 = {"x": [64, 56, 56], "w": [64, 64, 3, 3], "tier": 0}
    p1 = {"x": [80, 3000], "w": [512, 80, 3], "tier": 1}
    todo = conv_sweep.items([p1, p2])
    assert (todo[0]["n"], todo[0]["dtype"], todo[0]["layout"], todo[0]["x"]) == (
        8,
        "float32",
        "nchw",
        p2["x"],
    )
    assert not any(t["layout"] == "nhwc" and len(t["x"]) == 2 for t in todo)
    assert len(todo) == len(conv_sweep.BATCHES) * (6 + 3)


def test_every_convolution_of_resnet18_at_batch_8_is_measured():
    # torchvision's ResNet-18 at 224x224, batch 8, float32 and bfloat16 channels-last: forward,
    # dgrad and wgrad of each layer, which the sweep measured (no validation script runs it so)
    from vramscope import _native

    device = _native.Device("h200")
    problems = conv_sweep.extract([(0, "resnet18", conv_sweep._tv("resnet18"), [(3, 224, 224)])])
    assert len(problems) == 11
    for p in problems:
        for dtype, cl in (("float32", False), ("bfloat16", True)):
            for op in ("forward", "dgrad", "wgrad"):
                got = device.conv_workspace(
                    op,
                    dtype,
                    [8, *p["x"]],
                    p["w"],
                    p["stride"],
                    p["padding"],
                    p["dilation"],
                    p["groups"],
                    channels_last=cl,
                )
                assert got is not None, (op, dtype, p)
    # the stem's forward in float32, as the H200 measured it (conv_sweep_h200.tar.xz)
    stem = device.conv_workspace(
        "forward", "float32", [8, 3, 224, 224], [64, 3, 7, 7], [2, 2], [3, 3], [1, 1], 1
    )
    assert stem == 30544656


def test_the_last_of_the_sweep_is_in_the_table_and_the_sweep_is_whole(tmp_path):
    # conv_sweep4_h200.tar.xz: the 8,367 items no earlier call reached, worker 0's records
    _extract(tmp_path, "conv_sweep4_h200.tar.xz", (".err", "/w0.jsonl"))
    _extract(tmp_path, "conv_sweep2_h200.tar.xz", (".err", "problems.json"))
    _extract(tmp_path, "conv_sweep_h200.tar.xz", (".err",))
    d = tmp_path / "conv_sweep4"
    _, swept, _ = _swept_and_in_the_table(d)
    assert len(swept) == 1563
    n = len(conv_sweep.items(json.load(open(tmp_path / "conv_sweep2" / "problems.json"))))
    dirs = [str(tmp_path / s) for s in ("conv_sweep", "conv_sweep2", "conv_sweep3")]
    before, last = conv_sweep.reached(dirs, n), conv_sweep.reached([str(d)], n)
    assert (len(before), len(last), len(before & last), len(before | last)) == (100959, 8367, 0, n)


@pytest.mark.parametrize(
    ("archive", "counts", "one", "nbytes", "items"),
    [
        # conv_sweep5_h200.tar.xz: MODELS2's problems (`problems OUT.json 2`); X3D's 5x1x1 depthwise
        # temporal convolution in channels-last 3-D, which no earlier source held
        (
            "conv_sweep5_h200.tar.xz",
            (10818, 78),
            "wgrad bfloat16 nhwc 0 8,24,4,80,80 24,1,5,1,1 1,1,1 2,0,0 1,1,1 0,0,0 24",
            84383055,
            (76146, 62125),
        ),
        # conv_sweep7_h200.tar.xz: the vision zoo's problems that the first two lists lack
        # (`problems OUT.json 3`); a grouped stride-2 weight gradient in half channels-last
        (
            "conv_sweep7_h200.tar.xz",
            (9087, 78),
            "wgrad float16 nhwc 0 8,1344,28,28 1344,168,3,3 2,2 1,1 1,1 0,0 8",
            21077376,
            (222390, 47573),
        ),
    ],
)
def test_the_table_holds_a_model_lists_sweep(tmp_path, archive, counts, one, nbytes, items):
    # one call over a list's problems: worker 0's records (1 item in 16) and every worker's summary
    _extract(tmp_path, archive, (".err", "/w0.jsonl", "problems.json"))
    d = next(p for p in tmp_path.iterdir() if p.is_dir())
    table, swept, auto = _swept_and_in_the_table(d)
    assert (len(swept), len(auto)) == counts
    assert (table[one], swept[one]) == (nbytes, nbytes)
    n = len(conv_sweep.items(json.load(open(d / "problems.json"))))
    assert (n, len(conv_sweep.reached([str(d)], n))) == items


def _record(op, args, new, requested):
    """An ops_truth.py line of a convolution (bfloat16 tensors as [sizes, strides])."""
    t = lambda sizes, strides: [sizes, strides, "bfloat16", 0, "cuda"]  # noqa: E731
    args = [t(*a) if isinstance(a, tuple) else a for a in args]
    return json.dumps({"op": op, "args": args, "new": new, "count": 1 + len(new), "requested": requested})


def test_a_problem_is_read_from_the_gpus_record_whatever_the_twins_size_1_strides_issue_31(tmp_path):
    # blind56/bd05's squeeze-excitation convolution on the H200: the pooled (192, 96, 1, 1) input by a
    # channels-last (4, 96, 1, 1) weight. Where the twin's strides of size-1 dimensions were not the
    # GPU's (its forward here, as blind42/ap02's were), the GPU's record went unmatched and the table
    # took 0 bytes; by key it is read.
    x, xt = ([192, 96, 1, 1], [96, 1, 1, 1]), ([192, 96, 1, 1], [96, 1, 96, 96])
    w, g = ([4, 96, 1, 1], [96, 1, 96, 96]), ([192, 4, 1, 1], [4, 1, 1, 1])
    conv = [[1, 1], [0, 0], [1, 1], False, [0, 0], 1]
    fwd = [x, w, ([4], [1]), *conv]
    bwd = [g, x, w, [4], *conv]
    gpu, twin = tmp_path / "gpu", tmp_path / "twin"
    gpu.mkdir()
    twin.mkdir()
    (gpu / "s.jsonl").write_text(
        _record("convolution", fwd, [1536], 20224)
        + "\n"
        + _record("convolution_backward[0]", [*bwd, [True, False, False]], [36864], 73984)
        + "\n"
    )
    (twin / "s.jsonl").write_text(
        _record("convolution", [xt, *fwd[1:]], [1536], 1536)
        + "\n"
        + "".join(
            _record(f"convolution_backward[{i}]", [*bwd, mask], [n], n) + "\n"
            for i, (mask, n) in enumerate([([True, False, False], 36864), ([False, True, False], 768)])
        )
    )
    key = "{} bfloat16 {} 0 192,96,1,1 4,96,1,1 1,1 0,0 1,1 0,0 1"
    # forward and dgrad channels-last (the weight suggests it), wgrad NCHW (its input and gradient:
    # ConvShared.cpp), that one the twin's alone (nothing beyond its output on the GPU)
    assert conv_table.read(str(gpu), str(twin)) == {
        key.format("forward", "nhwc"): 18688,
        key.format("dgrad", "nhwc"): 37120,
        key.format("wgrad", "nchw"): 0,
    }
    # the table holds them so (bd05's records read by key), and the sweep's NCHW problems alike
    table = _lines(TABLE)
    assert conv_table.read(str(gpu), str(twin)).items() <= table.items()
    assert table[key.format("forward", "nchw")] == 18688


_COMPOSITES = {
    # blind88/cj01 (HF Moonshine under inference_mode): the dispatch mode sees `conv1d`, not
    # `convolution`, so its problems were not read and the twin left their workspace out (25 MiB of
    # reserved memory under the H200's). The H200's record of the second front-end convolution:
    # output 26,570,752 bytes, 97,909,776 requested in 2 allocations.
    "conv1d": (
        "float16",
        [([16, 416, 2999], [1247584, 2999, 1]), ([832, 416, 7], [2912, 7, 1]), ([832], [1]), [3]],
        ([26570752], 2, 97909776, 26570752),
        "forward float16 nchw 0 16,416,2999 832,416,7 3 0 1 0 1",
        97909776 - 26570752,
        ("forward float16 nchw 0 416,2999 832,416,7 3 0 1 0 1", "16:71339024"),
    ),
    # blind88/cj03 (HF MusicGen's EnCodec decoder under no_grad): `conv_transpose1d`, whose arguments
    # run (input, weight, bias, stride, padding, output_padding, groups, dilation). The first upsampling
    # layer: a transposed (channels-fastest) input copied contiguous (2,023,424 bytes), output 8,126,464
    # bytes, 37,077,008 requested in 3 allocations.
    "conv_transpose1d": (
        "float16",
        [([4, 1024, 247], [1024, 1, 4096]), ([1024, 512, 16], [8192, 16, 1]), ([512], [1]), [8]],
        ([8126464], 3, 37077008, None),
        "forward float16 nchw 1 4,1024,247 1024,512,16 8 0 1 0 1",
        37077008 - 8126464 - 2023424,
        ("forward float16 nchw 1 1024,247 1024,512,16 8 0 1 0 1", "4:26927120"),
    ),
    # blind108/dd07 (HighRes3DNet's sliding-window evaluation under inference_mode): `conv3d`, so the
    # twin estimated them (1 MiB over the H200's peak). The stem's second 3x3x3 convolution: output
    # 87,228,416 bytes, 261,699,088 requested in 2 allocations.
    "conv3d": (
        "bfloat16",
        [
            ([4, 16, 88, 88, 88], [10903552, 681472, 7744, 88, 1]),
            ([16, 16, 3, 3, 3], [432, 27, 9, 3, 1]),
            ([16], [1]),
            [1, 1, 1],
            [1, 1, 1],
        ],
        ([87228416], 2, 261699088, 87228416),
        "forward bfloat16 nchw 0 4,16,88,88,88 16,16,3,3,3 1,1,1 1,1,1 1,1,1 0,0,0 1",
        261699088 - 87228416,
        ("forward bfloat16 nchw 0 16,88,88,88 16,16,3,3,3 1,1,1 1,1,1 1,1,1 0,0,0 1", "4:174470672"),
    ),
}


@pytest.mark.parametrize("op", sorted(_COMPOSITES))
def test_a_composite_a_dispatch_mode_sees_is_read_as_its_convolution_problem(tmp_path, op):
    dtype, args, (new, count, requested, twin_requested), key, workspace, (line, batch) = _COMPOSITES[op]
    t = lambda sizes, strides: [sizes, strides, dtype, 0, "cuda"]  # noqa: E731
    args = [t(*a) if isinstance(a, tuple) else a for a in args]
    rec = {"op": op, "args": args, "new": new, "count": count, "requested": requested}
    twin_rec = rec if twin_requested is None else {**rec, "count": 1, "requested": twin_requested}
    gpu, twin = tmp_path / "gpu", tmp_path / "twin"
    gpu.mkdir()
    twin.mkdir()
    (gpu / "s.jsonl").write_text(json.dumps(rec) + "\n")
    (twin / "s.jsonl").write_text(json.dumps(twin_rec) + "\n")
    assert conv_table.read(str(gpu), str(twin)) == {key: workspace}
    # the table holds it by its problem without the batch
    assert any(line in raw and batch in raw for raw in conv_sweep.open_text(TABLE).read().splitlines())


def test_the_second_model_lists_sweep_continued_where_the_first_call_stopped(tmp_path):
    # conv_sweep6_h200.tar.xz: a second call over MODELS2's items that conv_sweep5's did not reach
    # (its w*.err handed over as DONE_DIRS), worker 0's records and every worker's summary
    _extract(tmp_path, "conv_sweep5_h200.tar.xz", (".err", "problems.json"))
    _extract(tmp_path, "conv_sweep6_h200.tar.xz", (".err", "/w0.jsonl"))
    _, swept, _ = _swept_and_in_the_table(tmp_path / "s6")
    assert len(swept) == 2046
    n = len(conv_sweep.items(json.load(open(tmp_path / "s5" / "problems.json"))))
    first, second = (
        conv_sweep.reached([str(tmp_path / "s5")], n),
        conv_sweep.reached([str(tmp_path / "s6")], n),
    )
    assert (len(first), len(second), len(first & second), len(first | second)) == (62125, 11697, 0, 73822)


def test_the_vision_zoos_sweep_continued_over_six_calls_that_reach_every_item(tmp_path):
    # conv_sweep8 to 13_h200.tar.xz: calls over the third list's items that the earlier ones did not
    # reach (their w*.err handed over as DONE_DIRS); worker 0's records of s10 in the table
    _extract(tmp_path, "conv_sweep7_h200.tar.xz", (".err", "problems.json"))
    for k in (8, 9, 11, 12, 13):
        _extract(tmp_path, f"conv_sweep{k}_h200.tar.xz", (".err",))
    _extract(tmp_path, "conv_sweep10_h200.tar.xz", (".err", "/w0.jsonl"))
    _, swept, _ = _swept_and_in_the_table(tmp_path / "s10")
    assert len(swept) == 9291
    n = len(conv_sweep.items(json.load(open(tmp_path / "s7" / "problems.json"))))
    reached = [conv_sweep.reached([str(tmp_path / f"s{k}")], n) for k in (7, 8, 9, 10, 11, 12, 13)]
    assert [len(r) for r in reached] == [47573, 32700, 31370, 48680, 27585, 27428, 7054]
    assert len(set().union(*reached)) == n == 222390


# the vision zoo's calls, whose archives keep conv_table.py's lines of all 16 workers' records but
# only worker 0's records: (the call, its problems, its autocast problems)
_KEPT_LINES = [
    (7, 138309, 972),
    (8, 95904, 702),
    (9, 91524, 675),
    (10, 141207, 1005),
    (11, 80895, 585),
    (12, 80013, 621),
    (13, 21033, 102),
]


def test_the_kept_lines_are_the_records_reading_and_the_tables_bytes(tmp_path):
    # each call's worker 0 records read as its kept lines; every kept line's bytes are the table's
    # but the 2 of s7 that the table kept from scripts' records (fixtures/run/README.md)
    table = _lines(TABLE)
    differ = []
    for k, count, autocast in _KEPT_LINES:
        _extract(tmp_path, f"conv_sweep{k}_h200.tar.xz", ("/w0.jsonl", "lines.txt"))
        d = tmp_path / f"s{k}"
        kept = dict(line.rsplit(" ", 1) for line in (d / "lines.txt").read_text().splitlines())
        auto = (d / "autocast_lines.txt").read_text().splitlines()
        assert (len(kept), len(auto)) == (count, autocast)
        assert set(auto) <= {f"{key} {b}" for key, b in kept.items()}
        if k == 12:
            mine = conv_table.read(str(d), str(d))
            assert len(mine) > 4000 and all(kept[key] == str(b) for key, b in mine.items())
        differ += [key for key, b in kept.items() if table[key] != int(b)]
    assert sorted(differ) == [
        "forward float32 nchw 0 16,256,28,28 21,256,1,1 1,1 0,0 1,1 0,0 1",
        "wgrad float32 nchw 0 16,256,28,28 21,256,1,1 1,1 0,0 1,1 0,0 1",
    ]


def test_informers_kernel_1_conv1d_takes_the_measured_forward_workspace():
    # blind174/fr02's H200 per-op truth (Informer's fp32 test pass: the encoder layer's conv1 of
    # d_model 512 to d_ff 2,048 at batch 48 over the distilled 360 steps): cuDNN's forward took
    # 179,044,595 bytes of workspace beside the (48, 2048, 360) output; the twin had estimated 407
    # bytes from the nearest measured problem before the table held it
    import torch
    import torch.nn.functional as F
    import vramscope

    with vramscope.capture(gpu="h200") as cap:
        x = torch.empty(48, 512, 360, device="cuda")
        w = torch.empty(2048, 512, 1, device="cuda")
        b = torch.empty(2048, device="cuda")
        before = torch.cuda.memory_stats()["requested_bytes.all.allocated"]
        with torch.no_grad():
            F.conv1d(x, w, b)
        after = torch.cuda.memory_stats()["requested_bytes.all.allocated"]
        assert after - before == 48 * 2048 * 360 * 4 + 179044595
    assert cap.report()["unmeasured"] == []


def test_a_keyword_spotters_strided_conv1d_takes_the_workspaces_of_its_memory_history():
    # blind265/jf04's H200 memory history (validation/run/history.py; `run_conv_plan`'s
    # allocations): the fp32 Conv1d of 256 to 256 channels, kernel 5, stride 2, padding 2 over 400
    # frames at batch 64: forward 40,632,336, dgrad 40,632,467, wgrad 44,565,135 bytes of workspace;
    # the twin had estimated 86,314,405 (batch 128's forward) and 43,705,514 / 46,088,415 from the
    # nearest measured problem before the table held them
    import torch
    import torch.nn.functional as F
    import vramscope

    with vramscope.capture(gpu="h200") as cap:
        x = torch.empty(64, 256, 400, device="cuda", requires_grad=True)
        w = torch.empty(256, 256, 5, device="cuda", requires_grad=True)
        stats = torch.cuda.memory_stats
        before = stats()["requested_bytes.all.allocated"]
        y = F.conv1d(x, w, stride=2, padding=2)
        assert stats()["requested_bytes.all.allocated"] - before == 64 * 256 * 200 * 4 + 40632336
        g = torch.empty_like(y)
        before = stats()["requested_bytes.all.allocated"]
        y.backward(g)
        grads = x.numel() * 4 + w.numel() * 4
        assert stats()["requested_bytes.all.allocated"] - before == grads + 40632467 + 44565135
    assert cap.report()["unmeasured"] == []


def test_a_whitened_cifar_stem_s_channels_last_bf16_forward_takes_the_measured_workspace():
    # blind172/fp03's H200 per-op truth (a 54-channel ZCA-whitened input into a 3 x 3 conv of 64,
    # channels-last bf16, batch 1,024 at 30 px): cuDNN's forward took 103,283,859 bytes of workspace
    # beside the (1024, 64, 30, 30) output; the twin had estimated 423 bytes from the nearest
    # measured problem before the table held it
    import torch
    import torch.nn.functional as F
    import vramscope

    with vramscope.capture(gpu="h200") as cap:
        x = torch.empty(1024, 54, 30, 30, device="cuda", dtype=torch.bfloat16)
        x = x.contiguous(memory_format=torch.channels_last)
        w = torch.empty(64, 54, 3, 3, device="cuda", dtype=torch.bfloat16)
        w = w.contiguous(memory_format=torch.channels_last)
        before = torch.cuda.memory_stats()["requested_bytes.all.allocated"]
        with torch.no_grad():
            F.conv2d(x, w, padding=1)
        after = torch.cuda.memory_stats()["requested_bytes.all.allocated"]
        assert after - before == 1024 * 64 * 30 * 30 * 2 + 103283859
    assert cap.report()["unmeasured"] == []


def test_a_one_value_output_padding_is_read_for_every_spatial_dimension(tmp_path):
    # torch.nn.grad.conv2d_input passes output_padding [0]; convolution_backward expands it
    # (Convolution.cpp's expand_param_if_needed) and the twin looks the problem up as "0,0": blind216/hh04
    t = lambda sizes, strides: [sizes, strides, "bfloat16", 0, "cuda"]  # noqa: E731
    args = [
        t([128, 512, 16, 16], [131072, 256, 16, 1]),
        t([128, 256, 16, 16], [0, 0, 0, 0]),
        t([512, 256, 3, 3], [2304, 9, 3, 1]),
        None,
        [1, 1],
        [1, 1],
        [1, 1],
        False,
        [0],
        1,
        [True, False, False],
    ]
    rec = {"op": "convolution_backward", "args": args, "new": [16777216], "count": 2}
    rec["requested"] = 16777216 + 52691091
    gpu, twin = tmp_path / "gpu", tmp_path / "twin"
    gpu.mkdir()
    twin.mkdir()
    (gpu / "s.jsonl").write_text(json.dumps(rec) + "\n")
    (twin / "s.jsonl").write_text(json.dumps(rec) + "\n")
    key = "dgrad bfloat16 nchw 0 128,256,16,16 512,256,3,3 1,1 1,1 1,1 0,0 1"
    assert conv_table.read(str(gpu), str(twin)) == {key: 52691091}


def test_normalize_expands_one_value_parameters_and_merge_reads_lines_so(tmp_path, capsys):
    # lines read before conv_table.py expanded one-value parameters (724b8ac) were keyed "0" and
    # never looked up (the twin expands them, 55cfc8f): `normalize` writes them for every spatial
    # dimension; one that lands on a key already there with its bytes is dropped, other bytes are a
    # conflict (stderr, the expanded key's bytes kept)
    table = {
        "forward bfloat16 nchw 0 96,3,224,224 768,3,16,16 16,16 0 1,1 0 1": 109117456,
        "wgrad bfloat16 nchw 0 64,128,32,32 128,128,3,3 1,1 1 1,1 0,0 1": 7,
        "wgrad bfloat16 nchw 0 64,128,32,32 128,128,3,3 1,1 1,1 1,1 0,0 1": 7,
        "dgrad float32 nchw 0 8,3,32,32 4,3,3,3 1,1 1,1 1,1 0 1": 5,
        "dgrad float32 nchw 0 8,3,32,32 4,3,3,3 1,1 1,1 1,1 0,0 1": 6,
        "forward float32 nchw 0 8,3,32 4,3,3 1 0 1 0 1": 9,
    }
    out, *counts = conv_sweep.normalize(table)
    assert counts == [1, 1, 1]
    assert out == {
        "forward bfloat16 nchw 0 96,3,224,224 768,3,16,16 16,16 0,0 1,1 0,0 1": 109117456,
        "wgrad bfloat16 nchw 0 64,128,32,32 128,128,3,3 1,1 1,1 1,1 0,0 1": 7,
        "dgrad float32 nchw 0 8,3,32,32 4,3,3,3 1,1 1,1 1,1 0,0 1": 6,
        "forward float32 nchw 0 8,3,32 4,3,3 1 0 1 0 1": 9,
    }
    err = capsys.readouterr().err
    assert "conflict: dgrad float32 nchw 0 8,3,32,32 4,3,3,3 1,1 1,1 1,1 0 1 expands to" in err
    # merge: the table's one-value line and a source's meet at one expanded key
    t = tmp_path / "t.txt"
    t.write_text("# h\nforward bfloat16 nchw 0 3,224,224 768,3,16,16 16,16 0 1,1 0 1 | 96:100\n")
    s = tmp_path / "s.txt"
    s.write_text(
        "forward bfloat16 nchw 0 8,3,224,224 768,3,16,16 16 0 1 0 1 3\n"
        "forward bfloat16 nchw 0 96,3,224,224 768,3,16,16 16,16 0,0 1,1 0,0 1 100\n"
    )
    assert conv_sweep.merge(str(t), str(s)) == [
        "# h",
        "forward bfloat16 nchw 0 3,224,224 768,3,16,16 16,16 0,0 1,1 0,0 1 | 8:3 96:100",
    ]
    assert "1 new from the sweep, 1 agreeing, 0 conflicting" in capsys.readouterr().err


def test_every_line_of_the_table_has_a_parameter_value_for_each_spatial_dimension():
    for line in conv_sweep.open_text(TABLE):
        if not line.startswith("#"):
            f = line.split(" | ")[0].split(" ")
            dims = len(f[5].split(",")) - 2
            assert all(len(p.split(",")) == dims for p in f[6:10]), line


def test_a_valid_padded_siglip_patch_embedding_takes_the_measured_forward_workspace():
    # blind167/fk02's H200 per-op truth (HF SigLIP B/16-256's bf16 patch embedding at batch 256,
    # padding="valid", which `_convolution_mode` passes as padding {0}): cuDNN's forward took 3,072
    # bytes of workspace beside the (256, 768, 16, 16) output; the table had it keyed "0" (read
    # before conv_table.py expanded one-value parameters) and the twin, which looks "0,0" up,
    # estimated it from a neighbour
    import torch
    import torch.nn.functional as F
    import vramscope

    with vramscope.capture(gpu="h200") as cap:
        x = torch.empty(256, 3, 256, 256, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(768, 3, 16, 16, device="cuda", dtype=torch.bfloat16)
        before = torch.cuda.memory_stats()["requested_bytes.all.allocated"]
        with torch.no_grad():
            F.conv2d(x, w, stride=16, padding="valid")
        after = torch.cuda.memory_stats()["requested_bytes.all.allocated"]
        assert after - before == 256 * 768 * 16 * 16 * 2 + 3072
    assert cap.report()["unmeasured"] == []


def test_run_benchmark_calls_each_op_twice_and_the_table_reads_first_less_second(
    tmp_path, capsys, monkeypatch
):
    # the CPU path of `conv_sweep.py run-benchmark` (no counters there), then a GPU-like line:
    # a first call one allocation and 4,096 bytes beyond its outputs more than the second
    import conv_benchmark_table
    import torch

    # run-benchmark turns benchmark mode and OPS_TRUTH_ALL on for its process: give them back
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", torch.backends.cudnn.benchmark)
    monkeypatch.setenv("OPS_TRUTH_ALL", "1")

    problem = {
        "x": [8, 16, 16],
        "w": [4, 8, 3, 3],
        "stride": [1, 1],
        "padding": [1, 1],
        "dilation": [1, 1],
        "transposed": False,
        "output_padding": [0, 0],
        "groups": 1,
        "tier": 0,
    }
    (tmp_path / "p.json").write_text(json.dumps([problem]))
    out = tmp_path / "b"
    conv_sweep.run_benchmark(str(tmp_path / "p.json"), str(out), 60, 0, 10, device="cpu")
    lines = [json.loads(line) for line in (out / "w0.jsonl").read_text().splitlines()]
    assert [r["index"] for r in lines] == list(range(0, len(conv_sweep.items([problem])), 10))
    assert all(len(r["ops"][op]) == 2 for r in lines for op in ("forward", "dgrad", "wgrad"))
    assert json.loads((out / "w0.err").read_text().splitlines()[-1])["done"] == len(lines)
    line = lines[0]
    first, second = line["ops"]["dgrad"]
    first.update(count=3, new=[8192], requested=8192 + 4096 + 512)
    second.update(count=2, new=[8192], requested=8192 + 512)
    first, second = line["ops"]["wgrad"]
    first.update(count=3, new=[1152], requested=1152 + 100)  # two more: not one search
    (out / "w0.jsonl").write_text(json.dumps(line) + "\n")
    entries = conv_benchmark_table.sweep_problems([str(out)])
    assert [(e["op"], e["search_workspace"]) for e in entries] == [("forward", 0), ("dgrad", 4096)]
    assert entries[1]["input"] == [8, 8, 16, 16] and entries[1]["channels_last"] is False
    assert entries[1]["plan_workspace"] == 512  # the second call's: the timed plan's
    assert "wgrad: 2 more allocations" in capsys.readouterr().err
    again = dict(entries[1], search_workspace=8192)
    assert conv_benchmark_table.merged(entries, [again]) == entries
    assert "disagree" in capsys.readouterr().err


def test_the_benchmark_table_holds_the_benchmark_sweeps_searches(tmp_path):
    # fixtures/run/cudnn_benchmark_sweep_h200.tar.xz (session 52): 12 workers of `conv_sweep.py
    # run-benchmark` for 290 s on one H200, 8,484 items; conv_benchmark_table.py reads all their
    # 25,452 ops (24,690 problems: items of both layouts that cuDNN runs in one agree) and the table
    # keeps every search, but for 6 of blind23/w01's forwards, which it read first: their search
    # plus w01's timed plan's workspace less the heuristics' plan's (the same sums)
    import lzma

    import conv_benchmark_table

    _extract(tmp_path, "cudnn_benchmark_sweep_h200.tar.xz", (".jsonl",))
    swept = conv_benchmark_table.sweep_problems([str(tmp_path / "b1")])
    assert len(swept) == 25_452 and len({conv_benchmark_table._key(p) for p in swept}) == 24_690
    with lzma.open(ROOT / "python" / "vramscope" / "cudnn_benchmark_h200.json.xz", "rt") as f:
        table = {conv_benchmark_table._key(p): p for p in json.load(f)["problems"]}
    differ = {
        conv_benchmark_table._key(p)
        for p in swept
        if table[conv_benchmark_table._key(p)]["search_workspace"] != p["search_workspace"]
    }
    assert len(differ) == 6 and all(k[:2] == ("forward", "float16") and k[2][0] == 32 for k in differ)
    assert max(p["search_workspace"] for p in swept) == 139_653_545_984
    # b2, the sweep continued past b1's items (session 52, 140 s): 7,158 searches, held as read
    more = conv_benchmark_table.sweep_problems([str(tmp_path / "b2")])
    assert len(more) == 7_158
    assert all(table[conv_benchmark_table._key(p)]["search_workspace"] == p["search_workspace"] for p in more)


def test_the_table_holds_blind266_to_268s_problems_measured_on_an_h100(tmp_path):
    # fixtures/run/conv_sweep_blind266_268_h100.tar.xz (session 61): `conv_sweep.py run
    # conv_problems_blind26N.json` on an H100, every item reached; the H100's heuristics choices are
    # the H200's where both measured (cudnn_conv_h100.txt against this table), so the table holds them
    _extract(tmp_path, "conv_sweep_blind266_268_h100.tar.xz", (".jsonl", ".err"))
    root = tmp_path / "conv_sweep_blind266_268_h100"
    counts = {}
    for n in (266, 267, 268):
        table, swept, auto = _swept_and_in_the_table(root / f"cs{n}")
        counts[n] = (len(swept), len(auto))
    assert counts == {266: (30, 3), 267: (240, 3), 268: (231, 0)}
    # blind268/ji04's batch-2 640 x 368 cascade convolution, as its conv-peak probe read it too
    one = "wgrad float32 nchw 0 2,36,640,368 18,36,3,3 1,1 1,1 1,1 0,0 1"
    assert table[one] == 107_800_623


def test_the_benchmark_table_holds_the_wild_programs_searches_measured_on_an_h100(tmp_path):
    # fixtures/run/cudnn_benchmark_sweep_wild_h100.tar.xz (session 61): `conv_sweep.py run-benchmark
    # fixtures/run/wild_benchmark_problems.json` on an H100, 594 of the 596 items (two over the operand
    # limit); every search is in the table as read, marked as the H100's, none near its free memory
    import lzma

    import conv_benchmark_table

    _extract(tmp_path, "cudnn_benchmark_sweep_wild_h100.tar.xz", (".jsonl",))
    swept = conv_benchmark_table.sweep_problems([str(tmp_path / "b3")])
    assert len(swept) == 1_782
    with lzma.open(ROOT / "python" / "vramscope" / "cudnn_benchmark_h200.json.xz", "rt") as f:
        table = {conv_benchmark_table._key(p): p for p in json.load(f)["problems"]}
    for p in swept:
        entry = table[conv_benchmark_table._key(p)]
        assert (entry["search_workspace"], entry["gpu"]) == (p["search_workspace"], "H100")
    assert max(p["search_workspace"] / p["free"] for p in swept) < 0.15


def test_a_channels_last_item_of_1x1_spatial_sizes_is_swept_with_channels_last_strides():
    # blind267/jh04's head: a pooled (N, 768, 1, 1) input by a (1280, 768, 1, 1) weight of a
    # channels-last model; `.contiguous(memory_format=channels_last)` kept the NCHW strides, so the
    # session-61 sweep measured the NCHW problem (conv_table read it as such) where the twin looks
    # up the channels-last one
    item = {"n": 128, "x": [768, 1, 1], "w": [1280, 768, 1, 1], "dtype": "float32", "layout": "nhwc"}
    x, w = conv_sweep._operands(item, "cpu")
    assert conv_table.suggests_channels_last([list(x.shape), list(x.stride())])
    assert conv_table.suggests_channels_last([list(w.shape), list(w.stride())])
    flat = dict(item, layout="nchw")
    x, w = conv_sweep._operands(flat, "cpu")
    assert not conv_table.suggests_channels_last([list(x.shape), list(x.stride())])
    item3 = {"n": 2, "x": [8, 1, 1, 1], "w": [4, 8, 1, 1, 1], "dtype": "float32", "layout": "nhwc"}
    x, w = conv_sweep._operands(item3, "cpu")
    assert conv_table.suggests_channels_last([list(x.shape), list(x.stride())])


def test_the_table_holds_blind271s_problems_measured_on_an_h100(tmp_path):
    # fixtures/run/conv_sweep_blind271_h100.tar.xz (session 61): `conv_sweep.py run
    # conv_problems_blind271.json` on an H100, all 6 items reached: jl04's 1x1 convolutions at 72 x 72
    # and jl05's stride-14 patch embedding, which the twin had estimated from neighbours
    _extract(tmp_path, "conv_sweep_blind271_h100.tar.xz", (".jsonl", ".err"))
    table, swept, _auto = _swept_and_in_the_table(tmp_path / "conv_sweep_blind271_h100" / "cs271")
    assert len(swept) == 18
    # jl05's local crops: the estimate was 59,955,173 bytes (a 29 MiB segment where the GPU's is 30)
    one = "forward bfloat16 nchw 0 256,3,98,98 768,3,14,14 14,14 0,0 1,1 0,0 1"
    assert table[one] == 61_014_032


def test_dinov2s_local_crop_patch_embedding_takes_the_measured_forward_workspace():
    # blind271/jl05: the bf16 stride-14 patch embedding of 256 local crops at 98 x 98 took 61,014,032
    # bytes of cuDNN workspace beside its (256, 768, 7, 7) output on the H100 (cs271)
    import torch
    import torch.nn.functional as F
    import vramscope

    with vramscope.capture(gpu="h200") as cap:
        x = torch.empty(256, 3, 98, 98, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(768, 3, 14, 14, device="cuda", dtype=torch.bfloat16)
        before = torch.cuda.memory_stats()["requested_bytes.all.allocated"]
        with torch.no_grad():
            F.conv2d(x, w, stride=14)
        after = torch.cuda.memory_stats()["requested_bytes.all.allocated"]
        assert after - before == 256 * 768 * 7 * 7 * 2 + 61_014_032
    assert cap.report()["unmeasured"] == []


def test_the_table_holds_blind269_to_271s_problems_measured_on_an_h100(tmp_path):
    # fixtures/run/conv_sweep_blind269_271_h100.tar.xz (session 61, call 3): `conv_sweep.py run
    # conv_problems_blindN.json` on an H100 (blind269 with 2 workers), every item reached, all merged
    _extract(tmp_path, "conv_sweep_blind269_271_h100.tar.xz", (".jsonl", ".err"))
    root = tmp_path / "conv_sweep_blind269_271_h100"
    counts = {}
    for n in (269, 270, 271):
        table, swept, auto = _swept_and_in_the_table(root / f"cs{n}")
        counts[n] = (len(swept), len(auto))
    assert counts == {269: (1371, 18), 270: (120, 0), 271: (18, 0)}
    # blind269/jj02's 448 x 448 stride-14 patch embedding: no forward workspace (estimated 45.8 MB before)
    one = "forward bfloat16 nchw 0 8,3,448,448 1024,3,14,14 14,14 0,0 1,1 0,0 1"
    assert table[one] == 0
    assert table[one.replace("forward", "wgrad")] == 64_946_320


def test_the_table_holds_jh04s_head_and_ji05s_trunk_problems_measured_on_an_h100(tmp_path):
    # fixtures/run/conv_sweep_jh04_ji05_h100.tar.xz (session 61, lead's call 5): cs's two problem
    # lists on an H100, every item reached; merged in session 62 (78 new problem-batches)
    _extract(tmp_path, "conv_sweep_jh04_ji05_h100.tar.xz", (".jsonl", ".err"))
    counts = {}
    for name in ("cs267h", "cs268j"):
        table, swept, auto = _swept_and_in_the_table(tmp_path / name)
        counts[name] = (len(swept), len(auto))
    assert counts == {"cs267h": (6, 3), "cs268j": (72, 0)}
    # jh04's pooled channels-last head, in its own layout (the table held it only as nchw before)
    assert table["forward bfloat16 nhwc 0 128,768,1,1 1280,768,1,1 1,1 0,0 1,1 0,0 1"] == 0
    # ji05's 60 x 80 ResNet-18 dgrad at batch 8 (estimated 39,922,573 bytes from 64 x 64 before)
    assert table["dgrad float32 nchw 0 8,128,60,80 128,128,3,3 1,1 1,1 1,1 0,0 1"] == 39_911_571


def test_the_table_holds_blind286s_problems_measured_on_an_h200(tmp_path):
    # fixtures/run/conv_sweep_blind282_290_h200.tar.xz (session 66): `conv_sweep.py run
    # conv_problems_blind286.json` with 2 workers, 189 of 192 items (3 over MAX_OPERAND_BYTES: ka05's
    # batch-512 1x1 forwards); with them blind286/ka03 (BasicVSR) is exact in all 4 phases on the H100,
    # where the estimates left its 720p phase 131,079,680 bytes under in peak allocated
    _extract(tmp_path, "conv_sweep_blind282_290_h200.tar.xz", ("cs286/w0.jsonl", "cs286/w1.jsonl", ".err"))
    table, swept, _auto = _swept_and_in_the_table(tmp_path / "cs286")
    assert len(swept) == 567
    # ka03's conv_hr at 720 x 1280 (estimated 471,988,929 bytes from 1024 x 1024 before)
    assert table["forward float32 nchw 0 1,64,720,1280 64,64,3,3 1,1 1,1 1,1 0,0 1"] == 472_006_803
    # not swept (the (512, 224, 325, 12) input is 1,789,132,800 bytes): measured by session 67's
    # probe on the H100 instead (fixtures/run/probes/md66_ka05_large_1x1_conv_workspaces_probe_s66_h100.txt)
    assert "512,224,325,12" not in "".join(swept)
    assert table["forward float32 nchw 0 512,224,325,12 32,224,1,1 1,1 0,0 1,1 0,0 1"] == 400


def test_problems_from_answers_output_padding_doubles_the_input():
    # validation/run/conv_problems_from_answers.py: the twin's message has no output_padding; a
    # ConvTranspose2d(k 4, s 2, p 1) doubles its input with op 0 (blind297/kl02's generator, whose
    # problems were swept at op 1 and stayed unmeasured), a 3 x 3 or 1 x 1 stride-2 layer's data
    # gradient with op 1, a 2 x 2 stride-2 upsampler with op 0, a stride-1 layer with op 0
    import conv_problems_from_answers as cpa

    assert cpa.output_padding([64, 3, 4, 4], [2, 2], [1, 1], [1, 1]) == [0, 0]
    assert cpa.output_padding([256, 128, 3, 3], [2, 2], [1, 1], [1, 1]) == [1, 1]
    assert cpa.output_padding([256, 128, 1, 1], [2, 2], [0, 0], [1, 1]) == [1, 1]
    assert cpa.output_padding([128, 64, 2, 2], [2, 2], [0, 0], [1, 1]) == [0, 0]
    assert cpa.output_padding([74, 512, 4, 4], [1, 1], [0, 0], [1, 1]) == [0, 0]
