"""cuDNN RNNs (`vramscope._rnn`) against what an sm_90 GPU's allocator counted for the same ops
(fixtures/run/truth_h200.tar.xz, validation/run/12_lstm_train.py and 13_gru_train.py: allocations and
requested bytes of each op)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import vramscope
from torch.nn.utils.rnn import pack_padded_sequence


def _counted(fn):
    """(allocations, requested bytes) made while `fn()` runs, freed or not."""
    before = torch.cuda.memory_stats()
    out = fn()
    after = torch.cuda.memory_stats()
    count = after["allocation.all.allocated"] - before["allocation.all.allocated"]
    req = after["requested_bytes.all.allocated"] - before["requested_bytes.all.allocated"]
    return out, count, req


def test_lstm_flattens_its_weights_and_runs_cudnn_with_the_measured_workspace_and_reserve():
    with vramscope.capture(gpu="h200") as cap:
        lstm = nn.LSTM(256, 1024, num_layers=2, batch_first=True, dropout=0.2).cuda()
        # _cudnn_rnn_flatten_weight: one zeroed buffer, the parameters moved into it
        assert torch.cuda.memory_allocated() == 54591488
        assert torch.cuda.max_memory_allocated() == 2 * 54591488
        storages = {p.untyped_storage()._cdata for p in lstm.parameters()}
        assert len(storages) == 1
        x = torch.empty(32, 128, 256, device="cuda", requires_grad=True)
        h = (torch.zeros(2, 32, 1024, device="cuda"), torch.zeros(2, 32, 1024, device="cuda"))
        # first call: the dropout state (a seed tensor, then cudnnDropoutGetStatesSize bytes)
        _, count, req = _counted(lambda: lstm(x, h))
        assert (count, req) == (2 + 6, 8 + 6488064 + 385352448)
        # GPU: _cudnn_rnn of this problem made 6 allocations, 385352448 bytes (x copy, output, hy,
        # cy, workspace 178782720, reserve 185073920)
        (out, _), count, req = _counted(lambda: lstm(x, h))
        assert (count, req) == (6, 385352448)
        g = torch.empty(32, 128, 1024, device="cuda")
        # GPU: _cudnn_rnn_backward made 11 allocations, 442565632 bytes; then AccumulateGrad copies
        # dx (batch-first, time-major strides) into x's layout
        _, count, req = _counted(lambda: out.backward(g))
        assert (count, req) == (11 + 1, 442565632 + 4194304)
        # the weights' gradients are views of one dw buffer
        assert len({p.grad.untyped_storage()._cdata for p in lstm.parameters()}) == 1
    assert cap.report()["unmeasured"] == []


def test_lstm_inference_takes_the_measured_workspace():
    # blind121/dq01's H200 per-op truth: Tacotron 2's encoder LSTM in eval under no_grad made 5
    # allocations, 89,522,688 bytes (x's time-major copy 6,553,600, output, hy, cy, workspace 76,284,416)
    with vramscope.capture(gpu="h200") as cap:
        lstm = nn.LSTM(512, 256, batch_first=True, bidirectional=True).cuda().eval()
        x = torch.empty(32, 512, 100, device="cuda").transpose(1, 2)
        with torch.no_grad():
            _, count, req = _counted(lambda: lstm(x))
        assert (count, req) == (5 + 2, 89522688 + 2 * 2 * 32 * 256 * 4)
    assert cap.report()["unmeasured"] == []


def test_packed_gru_takes_the_measured_problem_and_packing_copies_each_block():
    with vramscope.capture(gpu="h200") as cap:
        # 13_gru_train.py's model and first lengths
        torch.manual_seed(0)
        gru = nn.GRU(80, 512, num_layers=3, batch_first=True, bidirectional=True, dropout=0.1)
        nn.Linear(1024, 12)
        gru.cuda()
        lengths = torch.randint(100, 201, (64,))
        lengths[0] = 200
        x = torch.empty(64, 200, 80, device="cuda")
        # GPU: _pack_padded_sequence made 51 allocations, 6046720 bytes (50 blocks, their cat)
        ls, order = lengths.sort(descending=True)
        # (pack_padded_sequence moves the order to the input's device first: a host index raises
        # in index_select's CUDA wrapper)
        xs = x.index_select(0, order.to(x.device))
        (data, _), count, req = _counted(lambda: torch.ops.aten._pack_padded_sequence(xs, ls, True))
        assert data.shape == (9448, 80)
        assert (count, req) == (51, 6046720)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        gru(packed)  # the dropout state
        # GPU: _cudnn_rnn made 4 allocations, 1112801792 bytes; GRU.forward adds the zero hx and
        # h_n put back in the batch's order (index_select), 786432 bytes each
        (_, h_n), count, req = _counted(lambda: gru(packed))
        assert (count, req) == (4 + 2, 1112801792 + 2 * 786432)
        # GPU: _cudnn_rnn_backward made 6 allocations, 673170432 bytes; index_select's backward adds
        # new_zeros and index_adds into it in place (fixtures/run/sweeps/backward_inplace_h200.jsonl)
        g = torch.empty_like(h_n)
        _, count, req = _counted(lambda: h_n.backward(g))
        assert (count, req) == (6 + 1, 673170432 + 786432)
    assert cap.report()["unmeasured"] == []


def test_pack_padded_sequence_copies_only_the_blocks_that_are_not_contiguous():
    with vramscope.capture():
        x = torch.empty(3, 5, 8, device="cuda")
        # lengths 5, 3, 3: the block of 3 steps by 3 sequences is copied; the last 2 steps of one
        # sequence are contiguous already; then the cat
        fn = torch.ops.aten._pack_padded_sequence
        (_, sizes), count, req = _counted(lambda: fn(x, torch.tensor([5, 3, 3]), True))
        assert sizes.tolist() == [3, 3, 3, 1, 1]
        assert (count, req) == (2, 9 * 8 * 4 + 11 * 8 * 4)


def test_cudnn_rnn_backward_of_an_eval_mode_forward_raises():
    # cudnn/RNN.cpp `_cudnn_rnn_backward_input`: after x, dy, dx, dhy, dhx and dcx, `TORCH_CHECK(fn_train,
    # "cudnn RNN backward can only be called in training mode")`; the twin ran the backward through
    with vramscope.capture(gpu="h200"):
        m = nn.LSTM(64, 64, 2, batch_first=True).cuda().eval()
        x = torch.randn(8, 50, 64, device="cuda", requires_grad=True)
        out = m(x)[0].sum()
        before = torch.cuda.memory_allocated()
        with pytest.raises(RuntimeError, match="cudnn RNN backward can only be called in training mode"):
            out.backward()
        assert torch.cuda.memory_allocated() == before
        m.train()
        m(x)[0].sum().backward()
        assert x.grad is not None


def test_an_unmeasured_rnn_problem_is_named():
    with vramscope.capture() as cap:
        gru = nn.GRU(8, 16).cuda()
        gru(torch.empty(10, 3, 8, device="cuda"))
    (name,) = cap.report()["unmeasured"]
    # a persistent algorithm's workspace is not fitted; its reserve is (`_rnn._reserve_only`)
    assert name.startswith("cuDNN's training workspace of gru (input 8, hidden 16")


def test_an_rnn_whose_workspace_is_unmeasured_still_holds_its_reserve():
    # pytorch/examples word_language_model `--model RNN_TANH` (and RNN_RELU): 2 layers of 200 over 200
    # inputs, dropout 0.2, batch 20 of 35 steps, unpacked: a persistent algorithm (hidden <= 384),
    # whose workspace the sweeps do not give. The reserve does not depend on it: 256 + 4 * 700 *
    # (2 * 200 + 200) + 20 * 35 * 200 / 8 = 1,697,756 bytes, 1,697,792 allocated. Session 57's H200
    # records (wild/examples wlm_rnn_tanh, wlm_rnn_relu): peak allocated 236,260,864, the twin's
    # 1,697,792 under it while it left the reserve out with the workspace.
    from vramscope import _rnn

    for mode in ("rnn_tanh", "rnn_relu"):
        f = _rnn._fitted(
            _rnn.MODES[mode], torch.float32, 200, 200, 0, 2, False, 0.2, True, 20, 35, 700, False
        )
        assert f == {"workspace": None, "reserve": 1697756, "backward_workspace": None}
        # inference has no reserve: still nothing
        assert (
            _rnn._fitted(
                _rnn.MODES[mode], torch.float32, 200, 200, 0, 2, False, 0.2, False, 10, 35, 350, False
            )
            is None
        )
    with vramscope.capture(gpu="h200") as cap:
        rnn = nn.RNN(200, 200, num_layers=2, dropout=0.2).cuda()
        x = torch.empty(35, 20, 200, device="cuda", requires_grad=True)
        h = torch.zeros(2, 20, 200, device="cuda")
        rnn(x, h)  # the dropout state, once
        before = torch.cuda.memory_allocated()
        out, _hn = rnn(x, h)
        # output (35 x 20 x 200), hy, and the reserve saved for the backward; the workspace none
        assert torch.cuda.memory_allocated() - before == 560128 + 32256 + 1697792
        out.backward(torch.empty_like(out))
    (name,) = cap.report()["unmeasured"]
    assert name.startswith("cuDNN's training workspace of rnn_tanh (input 200, hidden 200, proj 0, 2 layers")


def test_a_packed_bidirectional_gru_outside_the_table_takes_the_fitted_sizes():
    # blind26/z06's GRU (fp32, 256 inputs, 512 hidden, 2 layers, bidirectional) on new lengths. GPU
    # (fixtures/run/rnn_sweep_h200.jsonl.xz, batch 8 of up to 50 steps, 281 steps in all): training
    # workspace 67948800 (= backward's), reserve 14962944
    with vramscope.capture(gpu="h200") as cap:
        gru = nn.GRU(256, 512, num_layers=2, bidirectional=True).cuda()
        lengths = torch.tensor([50, 49, 48, 36, 33, 32, 22, 11])
        assert int(lengths.sum()) == 281
        x = torch.empty(50, 8, 256, device="cuda", requires_grad=True)
        packed = pack_padded_sequence(x, lengths)
        # _cudnn_rnn: output (281 x 1024), hy (4 x 8 x 512), the workspace and the reserve
        _, count, req = _counted(lambda: gru(packed))
        hx = 4 * 8 * 512 * 4
        assert (count, req) == (1 + 4, hx + 281 * 1024 * 4 + hx + 67948800 + 14962944)
    assert cap.report()["unmeasured"] == []


def test_the_fitted_sizes_agree_with_the_measured_table_where_both_hold():
    from vramscope import _rnn

    # the table's problems measured per op on real scripts (blind13/m03, blind26/z06's first
    # lengths, 13_gru_train.py and blind8/h05 with dropout 0.1)
    checked = reserves = 0
    for p in _rnn._problems().values():
        packed = p["batch_sizes"] is not None
        tokens = sum(p["batch_sizes"]) if packed else p["batch"] * p["seq_length"]
        # blind135/ee02's packed 3-layer LSTM of 640 has dropout 0.1 too
        dropout = 0.1 if (p["mode"], p["input_size"]) in (("gru", 80), ("lstm", 256), ("lstm", 640)) else 0.0
        if (p["mode"], p["dtype"], p["hidden_size"]) == ("gru", "float16", 768):
            dropout = 0.2  # blind73/bu03
        problem = (p["mode"], p["dtype"], p["input_size"], p["hidden_size"])
        if problem in (("gru", "float16", 512, 512), ("gru", "float16", 1536, 1024)):
            dropout = 0.3  # blind150/et04's encoder and decoder
        if problem == ("lstm", "float16", 128, 2048):
            dropout = 0.25  # blind150/et03
        if problem in (("lstm", "float32", 160, 160), ("lstm", "float32", 54, 128)):
            dropout = 0.1  # blind174/fr04's TFT and fr05's DeepAR
        if problem == ("rnn_tanh", "float32", 256, 1024):
            dropout = 0.2  # blind58/bf04 (its reserve, the workspace not fitted)
        if problem == ("lstm", "float16", 512, 384):
            dropout = 0.1  # blind180/fx01's wide variant (its reserve, the workspace not fitted)
        if problem[0::2] == ("lstm", 512) and p["hidden_size"] == 256 and p["num_layers"] == 3:
            dropout = 0.4  # blind190/gh06 (its reserve, the workspace not fitted)
        if problem == ("lstm", "float16", 384, 1024):
            dropout = 0.1  # blind150/et06 (its training over 800 steps: `_wavefront_steps`)
        fitted = _rnn._fitted(
            _rnn.MODES[p["mode"]],
            getattr(torch, p["dtype"]),
            p["input_size"],
            p["hidden_size"],
            p["proj_size"],
            p["num_layers"],
            p["bidirectional"],
            dropout,
            p["train"],
            p["batch"],
            p["seq_length"],
            tokens,
            packed,
        )
        if fitted is not None:
            # a problem run forward only (blind96/cr01's rollout steps) has no backward measured
            # (a reserve alone, the workspace None, where only the reserve is fitted: `_reserve_only`)
            measured = {
                k: p[k]
                for k in ("workspace", "reserve", "backward_workspace")
                if k in p and fitted.get(k) is not None
            }
            assert {k: fitted[k] for k in measured} == measured
            if fitted.get("workspace") is None:
                reserves += 1
            else:
                checked += 1
    # ten bidirectional problems (blind58/bf01's 4-layer LSTM encoder added in session 17 and
    # blind73/bu03's fp16 GRU under autocast, both of which the formula answered before their GPU
    # runs), 12_lstm_train.py's unidirectional LSTM and blind96/cr01's two GRU problems (a rollout
    # step and the update over 64 steps, also answered by the formula before their GPU run), and
    # blind108/dd06's 2-layer bidirectional LSTM (Demucs), measured in session 26, and blind121/dq03's
    # six packed bidirectional fp16 GRU problems (DeepSpeech 2, answered by the formula before the GPU run),
    # and blind135's eight (ee06's packed bidirectional GRUs, ee02's packed 3-layer LSTM with dropout),
    # and blind139/ei05's three (FiLM's packed fp16 GRU of 4,096: two training problems, one inference),
    # and blind150's eight (et03's fp16 LSTM of 2,048 training and sampling, et04's packed bidirectional
    # fp16 GRU encoder and its decoder step, all answered by the formula before the GPU run), and the
    # fifteen unpacked LSTMs of hidden <= 192 that run the persistent small-h algorithm forward
    # (`_fitted_small_h`: blind174/fr04's and fr05's ten, blind121's four float16 LSTMs of 160 and
    # blind141's float16 inference of 64), and blind180/fx01's two bidirectional LSTMs of 256 over
    # 256 inputs (CRNN's second BiLSTM, training at batch 512 and inference at 1,024; its first, over
    # 512 inputs, and the float16 3-layer LSTM of 384 lie outside the formula), and blind186/gd06's
    # fp32 2-layer LSTM of 512 in eval at batch 32 x 75 (its two training problems lie outside it), and
    # blind190/gh03's 2-layer bidirectional LSTM of 768 (the Demucs denoiser's, float16 under bf16
    # autocast at batch 16 x 249; gh02's, gh04's and gh06's eleven lie outside it), and blind191/gi03's
    # seven (MusicVAE's float16 bidirectional encoder LSTM of 1,024 over 256 steps, training at 128
    # and inference at 256; its conductor of 1,024 on one input, training at 128 and inference at 256
    # and 32; its bar decoder over 1,114 inputs in inference at 4,096 and 32; the decoder's training
    # at 2,048 x 16 lies outside the formula), and blind215/hg03's EnCodec round trip (fp32 2-layer
    # LSTM of 512 in inference at batch 8 x 750; its training problem and hg02's two lie outside it),
    # and blind222/hn04's four (R2D2's one-layer LSTM of 512 over 531 inputs at batch 48, training
    # over 80 steps and its 40-step burn-in in train mode under no_grad, fp32 and float16 under bf16
    # autocast, all answered by the formula before the GPU run), and blind223/ho05's six (AutoVC's
    # unidirectional LSTMs: the decoder's LSTM of 512 over 320 inputs training at 64 x 384 in fp32 and
    # float16, its 2-layer LSTM of 1,024 and lstm1 in inference at 128, the frozen 3-layer d-vector LSTM
    # of 768 in inference at 64 and 128; all answered by the formula before the GPU run; the set's
    # eleven others lie outside it), and nine unpacked bidirectional LSTMs of hidden <= 192
    # (`_fitted_small_h_bidir`, session 61: blind150/et05's two, blind190/gh02's six, blind223/ho05's
    # 2-layer inference), and 22 more with `_wavefront_steps`' chunks and the LSTM/GRU
    # forms past 400 steps): blind58/bf04's 3-layer RNN_TANH of 1,024, blind13/m03's and another 2-layer
    # GRU (64 x 128, 64 x 100), blind304/ks05's and blind312/la05's two 2-layer float16 GRUs of 1,024
    # (these six a reserve alone before, below), the 2-layer LSTMs of 320 and 512 over 61 and 75
    # steps (blind186/gd06's, blind215/hg02's and hg03's, seven in all), blind190/gh04's training at
    # 12 x 501 (fp32 and float16) and inference at 8 x 1,251, blind150/et06's training at 48 x 800,
    # blind223/ho05's two at 64 x 384, blind321/lj03's two, la05's inference at 32 x 1,024; and
    # blind191/gi03's decoder training at 2,048 x 16 (`_WAVEFRONT_CHUNKS`' last row to batch 4,096)
    assert checked == 108
    # and sixteen RNN_TANH/RELU and GRU training problems whose reserve alone is fitted (`_reserve_only`:
    # persistent algorithms, or workspaces not linear in batch and steps), and 18 bidirectional ones
    # outside `_fitted`'s workspace forms (`_bi_reserve_only`; three more, et05's and gh02's small-h
    # training problems, now take `_fitted_small_h_bidir` whole, above), and blind304/ks05's 2-layer
    # float16 GRU of 1,024 and blind312/la05's two 2-layer float16 GRU training problems of 1,024 over
    # 1,024 inputs (workspaces then not linear in batch and steps): each reserve exact; since session
    # 71 ks05's, la05's, bf04's and two more 2-layer GRUs' are whole problems (above)
    assert reserves == 31


def test_blind191_musicvae_decoder_lstm_training_problem_is_measured():
    from vramscope import _rnn

    # blind191/gi03: MusicVAE's bar decoder, a 2-layer LSTM of 1,024 over 1,114 inputs (the previous
    # step's one-hot and the bar's conductor embedding), 16 bars of a batch of 128 decoded together
    # as 2,048 sequences of 16 steps in float16 under fp16 autocast, measured on the H200
    # (truth_blind191_h200.tar.xz: _cudnn_rnn requested 1,442,021,888 bytes in 6 allocations, the
    # backward 1,447,870,976 in 11); the fitted form gives it exactly with the wavefront's chunk of 2
    # steps at batch 2,048 (`_WAVEFRONT_CHUNKS`; probes/rn71_rnn_wavefront_chunk_probe_gaps_h100.jsonl)
    lstm = _rnn.MODES["lstm"]
    f = _rnn._fitted(lstm, torch.float16, 1114, 1024, 0, 2, False, 0.0, True, 2048, 16, 32768, False)
    assert f == {"workspace": 546930944, "reserve": 738197760, "backward_workspace": 546930944}
    got = {
        p["batch"]: (p["workspace"], p["reserve"], p["backward_workspace"])
        for p in _rnn._problems().values()
        if (
            p["mode"],
            p["dtype"],
            p["input_size"],
            p["hidden_size"],
            p["num_layers"],
            p["seq_length"],
            p["train"],
        )
        == ("lstm", "float16", 1114, 1024, 2, 16, True)
    }
    assert got == {2048: (546930944, 738197760, 546930944)}


def test_blind223_tts_rnn_problems_outside_the_formula_are_measured():
    from vramscope import _rnn

    # blind223 (truth_blind223_h200.tar.xz, read by rnn_table.py): ho04's CBHG BiGRU of 128 over 128
    # (hidden < 256: outside `_fitted`), ho05's AutoVC content bottleneck, a 2-layer BiLSTM of 32 over
    # 512, and its decoder's 2-layer LSTM of 1,024 over 512, and ho02's Tacotron 2 encoder BiLSTM of
    # 256 over 512 (2·input > G·hidden); training in float32 and float16 (fp16 and bf16 autocast),
    # inference at twice the batch. Each was named unmeasured blind; with them ho02, ho04 and ho05 are
    # exact in all 12 phases
    gru, lstm = _rnn.MODES["gru"], _rnn.MODES["lstm"]
    # (the workspace only: the reserve is the bidirectional form's, `_bi_reserve_only`)
    f = _rnn._fitted(gru, torch.float32, 128, 128, 0, 1, True, 0.0, True, 64, 400, 25600, False)
    assert f == {"workspace": None, "reserve": 157286656, "backward_workspace": None}
    f = _rnn._fitted(lstm, torch.float32, 512, 32, 0, 2, True, 0.0, True, 64, 384, 24576, False)
    assert f == {"workspace": None, "reserve": 69206272, "backward_workspace": None}
    got = {
        (p["mode"], p["dtype"], p["input_size"], p["hidden_size"], p["batch"], p["train"]): (
            p["workspace"],
            p.get("reserve"),
            p.get("backward_workspace"),
        )
        for p in _rnn._problems().values()
        if (p["input_size"], p["hidden_size"], p["seq_length"])
        in ((128, 128, 400), (512, 32, 384), (512, 1024, 384), (512, 256, 96))
    }
    assert got == {
        ("gru", "float32", 128, 128, 64, True): (358810368, 157286656, 358810368),
        ("gru", "float16", 128, 128, 64, True): (187794176, 78643456, 187794176),
        ("gru", "float32", 128, 128, 128, False): (673580288, None, None),
        ("lstm", "float32", 512, 32, 64, True): (399540992, 69206272, 399540992),
        ("lstm", "float16", 512, 32, 64, True): (216548096, 34603264, 216548096),
        ("lstm", "float32", 512, 32, 128, False): (324207872, None, None),
        ("lstm", "float32", 512, 1024, 64, True): (500171520, 1107296512, 500171520),
        ("lstm", "float16", 512, 1024, 64, True): (258474752, 553648384, 258474752),
        ("lstm", "float32", 512, 1024, 128, False): (924845312, None, None),
        ("lstm", "float32", 512, 256, 64, True): (138019584, 62914816, 138019584),
        ("lstm", "float16", 512, 256, 64, True): (77398784, 31457536, 77398784),
        ("lstm", "float32", 512, 256, 32, False): (74187264, None, None),
    }


def test_blind190_separation_lstm_problems_are_measured():
    from vramscope import _rnn

    # blind190/gh02: DPRNN's intra- and inter-chunk bidirectional LSTMs of 128 run in float16 under
    # fp16 autocast (training at 664 x 100 and 800 x 83, no_grad validation at 1,328 x 100 and
    # 1,600 x 83, per-op truth; the 30-second mixture's 603 x 100 and 100 x 603 under inference_mode
    # read from the H200's memory history, whose per-op lane the time budget cut); gh04's
    # 2-layer LSTM of 512 over 1,792 features and gh06's 3-layer bidirectional LSTM of 256
    got = {
        (p["dtype"], p["input_size"], p["hidden_size"], p["batch"], p["seq_length"], p["train"]): (
            p["workspace"],
            p.get("reserve"),
        )
        for p in _rnn._problems().values()
        if p["mode"] == "lstm"
        and (p["input_size"], p["hidden_size"]) in ((128, 128), (1792, 512), (512, 256))
    }
    assert {k: v for k, v in got.items() if k[1] == 128} == {
        ("float16", 128, 128, 664, 100, True): (547317184, 169984256),
        ("float16", 128, 128, 800, 83, True): (547944960, 169984256),
        ("float16", 128, 128, 1328, 100, False): (1077332608, None),
        ("float16", 128, 128, 1600, 83, False): (1078588160, None),
        ("float16", 128, 128, 603, 100, False): (498626016, None),
        ("float16", 128, 128, 100, 603, False): (496304160, None),
    }
    assert got[("float16", 1792, 512, 12, 501, True)] == (107927904, 67719424)
    assert got[("float32", 1792, 512, 12, 501, True)] == (199078240, 135438592)
    assert got[("float32", 1792, 512, 8, 1251, False)] == (153379136, None)
    assert got[("float32", 512, 256, 16, 259, True)] == (155353472, 145338624)
    assert got[("float16", 512, 256, 32, 259, True)] == (145916416, 146399488)
    assert got[("float32", 512, 256, 1, 1292, False)] == (90448160, None)


def test_blind351_musicgen_encodec_bfloat16_lstm_inference_workspaces_are_measured():
    from vramscope import _rnn

    # blind351/mp03: EnCodec's decoder (a bfloat16 model, no autocast) runs its 2-layer LSTM of 1024
    # time-major at batch 4 x 297 and 2 x 197 frames; the H100 history (history_mp03_s79_h100)
    # requests workspaces of 63,750,432 and 55,255,328 bytes, the float16 inference form's to the
    # byte (the fitted domain leaves bfloat16 out)
    for batch, seq, ws in ((4, 297, 63750432), (2, 197, 55255328)):
        key = ("lstm", "bfloat16", 1024, 1024, 0, 2, False, batch, seq, None, False)
        assert _rnn._problems()[key]["workspace"] == ws
        f16 = _rnn._fitted(
            _rnn.MODES["lstm"],
            torch.float16,
            1024,
            1024,
            0,
            2,
            False,
            0.0,
            False,
            batch,
            seq,
            batch * seq,
            False,
        )
        assert f16["workspace"] == ws
    with vramscope.capture(gpu="h100") as cap:
        lstm = nn.LSTM(1024, 1024, 2).cuda().to(torch.bfloat16).eval()
        x = torch.empty(197, 2, 1024, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            _, count, req = _counted(lambda: lstm(x))
        # as in the history: h0 and c0 zeros, output, hy, cy, the weights' copy (the flat buffer is
        # not the module's), the workspace
        state, out, weights = 2 * 2 * 1024 * 2, 197 * 2 * 1024 * 2, 33587200
        assert (count, req) == (7, 2 * state + out + 2 * state + weights + 55255328)
    assert cap.report()["unmeasured"] == []


def test_blind186_encodec_lstm_training_problems_are_measured():
    from vramscope import _rnn

    # blind186/gd06: the EnCodec-like codec's 2-layer residual LSTM of 512 over 75 frames, trained
    # in float16 (bf16 autocast runs _cudnn_rnn in float16) at batch 48 and in fp32 (the decoder's
    # fine-tune) at batch 32; outside the fitted formula, measured on the H200
    got = {
        (p["dtype"], p["batch"]): (p["workspace"], p["reserve"], p["backward_workspace"])
        for p in _rnn._problems().values()
        if (p["mode"], p["input_size"], p["hidden_size"], p["num_layers"], p["seq_length"], p["train"])
        == ("lstm", 512, 512, 2, 75, True)
        and (p["dtype"], p["batch"]) in (("float16", 48), ("float32", 32))
    }
    assert got == {
        ("float16", 48): (48267904, 40550656, 48267904),
        ("float32", 32): (64356864, 54067456, 64356864),
    }


def test_blind215_codec_lstm_training_problems_are_measured():
    from vramscope import _rnn

    # blind215/hg02 (an EnCodec-like codec whose 2-layer LSTM of 512 runs in float16 under bf16
    # autocast, AutocastRNN.cpp, at batch 24 and 32) and hg03 (transformers' EncodecModel decoder
    # fine-tuned in fp32 at batch 16), 75 frames; unidirectional training with more layers where the
    # second form f exceeds the first lay outside the fitted formula; measured on the H200
    # (truth_blind215_h200.tar.xz, validation/run/rnn_table.py). `_wavefront_steps` now gives
    # them (chunks of 4 at batch 20 to 96 and of 8 at 10 to 16 over 75 steps), all three exact
    lstm = _rnn.MODES["lstm"]
    got = {
        (p["dtype"], p["batch"]): (p["workspace"], p["reserve"], p["backward_workspace"])
        for p in _rnn._problems().values()
        if (p["mode"], p["input_size"], p["hidden_size"], p["num_layers"], p["seq_length"], p["train"])
        == ("lstm", 512, 512, 2, 75, True)
        and (p["dtype"], p["batch"]) in (("float16", 24), ("float16", 32), ("float32", 16))
    }
    assert got == {
        ("float16", 24): (36716992, 20275456, 36716992),
        ("float16", 32): (40567296, 27033856, 40567296),
        ("float32", 16): (48955776, 27033856, 48955776),
    }
    for (dtype, b), (ws, reserve, _) in got.items():
        f = _rnn._fitted(lstm, getattr(torch, dtype), 512, 512, 0, 2, False, 0.0, True, b, 75, b * 75, False)
        assert f == {"workspace": ws, "reserve": reserve, "backward_workspace": ws}


def test_blind304_d2l_two_layer_float16_gru_training_problem_is_measured():
    from vramscope import _rnn

    # blind304/ks05 (d2l's concise 2-layer nn.GRU of 1,024 over 96 one-hot inputs, float16 under
    # autocast, batch 256, 64 steps, no dropout): unpacked GRUs of 2+ layers over 7 steps without
    # dropout lie outside the fitted formula (workspace left out); the H100's record
    # (fixtures/run/run_blind304_h100.jsonl) puts 178,850,304 bytes (the workspace rounded to 512)
    # above the twin that left it out, the inference form's size, as in 107 of the sweep's 152
    # such GRUs with inputs narrower than the hidden size (rnn_sweep_uni_h200.jsonl.xz; the rest
    # up to 716,800 bytes more); the H100 probe validation/run/probes/ks68_gru2_fp16_rnn_workspace_probe.py
    # (fixtures/run/probes/ks68_gru2_rnn_probe_h100.jsonl) reads these three sizes to the byte
    # `_wavefront_steps` now gives it (chunks of 2 at batch 256 over 64 steps; max(a, f) = a)
    gru = _rnn.MODES["gru"]
    fitted = _rnn._fitted(gru, torch.float16, 96, 1024, 0, 2, False, 0.0, True, 256, 64, 16384, False)
    assert fitted["workspace"] == 178850048
    infer = _rnn._fitted(gru, torch.float16, 96, 1024, 0, 2, False, 0.0, False, 256, 64, 16384, False)
    key = ("gru", "float16", 96, 1024, 0, 2, False, 256, 64, None, True)
    p = _rnn._problems()[key]
    assert (p["workspace"], p["reserve"], p["backward_workspace"]) == (
        178850048,
        fitted["reserve"],
        178850048,
    )
    assert p["workspace"] == infer["workspace"]


def test_blind312_samplernn_two_layer_gru_problems_are_measured():
    from vramscope import _rnn

    # blind312/la05 (SampleRNN's frame tiers: 2-layer nn.GRU of 1,024 over 1,024 inputs, no dropout):
    # float16 training under bf16 autocast (AutocastRNN.cpp casts to kHalf) at 64 x 64 and 64 x 256
    # steps lies outside the fitted formula (unpacked, 2+ layers, over 7 steps, no dropout), and its
    # float32 evaluation at 32 x 1,024 steps past the inference form's 800. The H100 probe
    # validation/run/probes/la69_la05_gru_workspace_probe.py
    # (fixtures/run/probes/la69_la05_gru_rnn_probe_h100.jsonl) measured them; the two training
    # workspaces lie 2 and 3 MiB above the inference form (which the probe reads exactly for both).
    # With the three lines la05 is exact in all five phases on the H100.
    # Both are now `_fitted_uni`'s f with `_wavefront_steps`' k: 24 over 256 steps (chunks
    # of 8), 16 over 64 (chunks of 4)
    gru = _rnn.MODES["gru"]
    for seq, ws in ((64, 87294720), (256, 214172416)):
        tokens = 64 * seq
        fitted = _rnn._fitted(gru, torch.float16, 1024, 1024, 0, 2, False, 0.0, True, 64, seq, tokens, False)
        assert fitted["workspace"] == ws
        infer = _rnn._fitted(gru, torch.float16, 1024, 1024, 0, 2, False, 0.0, False, 64, seq, tokens, False)
        p = _rnn._problems()[("gru", "float16", 1024, 1024, 0, 2, False, 64, seq, None, True)]
        assert (p["workspace"], p["reserve"], p["backward_workspace"]) == (ws, fitted["reserve"], ws)
        assert p["workspace"] - infer["workspace"] == (1 if seq == 64 else 1.5) * 2 * 1024 * 1024
    # its evaluation at 1,024 steps: the inference form (to `_UNPACKED_LONGEST` steps unpacked)
    f = _rnn._fitted(gru, torch.float32, 1024, 1024, 0, 2, False, 0.0, False, 32, 1024, 32768, False)
    p = _rnn._problems()[("gru", "float32", 1024, 1024, 0, 2, False, 32, 1024, None, False)]
    assert p["workspace"] == f["workspace"] == 437518848


def test_the_fitted_sizes_hold_only_in_their_domain():
    from vramscope import _rnn

    lstm, gru, tanh = _rnn.MODES["lstm"], _rnn.MODES["gru"], _rnn.MODES["rnn_tanh"]
    args = (512, 0, 2, True, 0.0, True, 8, 50, 281)
    assert _rnn._fitted(gru, torch.float32, 256, *args) is not None
    # GPU: bfloat16 cuDNN RNNs fail (CUDNN_STATUS_BAD_PARAM); projected training with inputs wider
    # than the hidden size and inputs wider than the gates fall outside what the sweeps confirmed
    assert _rnn._fitted(gru, torch.bfloat16, 256, *args) is None
    assert _rnn._fitted(lstm, torch.float32, 1000, 512, 128, 2, True, 0.0, True, 8, 50, 281) is None
    assert _rnn._fitted(gru, torch.float32, 800, *args)["workspace"] is None
    # RNN_TANH: one layer, and inference, differ from the fitted form (one layer's reserve holds)
    assert _rnn._fitted(tanh, torch.float32, 256, 512, 0, 1, True, 0.0, True, 8, 50, 281)["workspace"] is None
    assert _rnn._fitted(tanh, torch.float32, 256, 512, 0, 2, True, 0.0, False, 8, 50, 281) is None
    # GPU (rnn_sweep_h200.jsonl.xz): fp16 LSTM, 256 inputs, 512 hidden, 2 layers, batch 8, 281 steps
    f = _rnn._fitted(lstm, torch.float16, 256, *args)
    assert f is not None and f["reserve"] == 256 + 2 * 281 * (4 * 5 * 512 + 2 * 512)


def test_the_unidirectional_inference_form_holds_to_800_steps():
    from vramscope import _rnn

    # GPU (fixtures/run/run_flash_rnn_probe_s36_h200.jsonl, its memory history): blind150/et06's
    # evaluation LSTM under bf16 autocast (cuDNN runs it in float16), 384 inputs, 1,024 hidden,
    # 2 layers, unpacked, 800 steps: workspaces of 607,126,784 bytes at batch 128 and 255,853,184 at 48
    lstm = _rnn.MODES["lstm"]
    for batch, workspace in ((128, 607126784), (48, 255853184)):
        args = (torch.float16, 384, 1024, 0, 2, False, 0.0, False, batch, 800, batch * 800, False)
        assert _rnn._fitted(lstm, *args) == {"workspace": workspace}
    # and its training at 48 x 800 (dropout 0.1; cudnn_rnn_h200.json): `_wavefront_steps`' k = 24
    f = _rnn._fitted(lstm, torch.float16, 384, 1024, 0, 2, False, 0.1, True, 48, 800, 38400, False)
    assert f == {"workspace": 344523392, "reserve": 869990656, "backward_workspace": 344523392}


def test_an_unpacked_bidirectional_lstm_outside_the_table_takes_the_fitted_sizes():
    # GPU (fixtures/run/rnn_sweep_h200.jsonl.xz): fp32 LSTM, 256 inputs, 512 hidden, 2 layers,
    # bidirectional, batch 8 of 50 steps: training workspace 83968320, reserve 18022656
    with vramscope.capture(gpu="h200") as cap:
        lstm = nn.LSTM(256, 512, num_layers=2, bidirectional=True).cuda()
        x = torch.empty(50, 8, 256, device="cuda", requires_grad=True)
        # LSTM.forward's zero h0 and c0, then output, hy, cy, the workspace and the reserve
        _, count, req = _counted(lambda: lstm(x))
        state = 4 * 8 * 512 * 4
        assert (count, req) == (2 + 5, 4 * state + 50 * 8 * 1024 * 4 + 83968320 + 18022656)
    assert cap.report()["unmeasured"] == []


def test_the_fitted_sizes_match_a_held_out_problem():
    from vramscope import _rnn

    # GPU, a held-out problem of the sweep: fp32 LSTM, 352 inputs, 1092 hidden, 4 layers,
    # bidirectional, unpacked batch 99 of 120 steps
    f = _rnn._fitted(
        _rnn.MODES["lstm"], torch.float32, 352, 1092, 0, 4, True, 0.0, True, 99, 120, 99 * 120, False
    )
    assert f == {"workspace": 1245724960, "reserve": 2387024896, "backward_workspace": 1245724960}
    # unpacked: one step, inputs wider than the hidden size and RNN_TANH's small-hidden algorithm
    # fall outside
    # fall outside (their workspaces; the reserve is the bidirectional form's in training)
    lstm, tanh = _rnn.MODES["lstm"], _rnn.MODES["rnn_tanh"]
    for f in (
        _rnn._fitted(lstm, torch.float32, 352, 1092, 0, 4, True, 0.0, True, 99, 1, 99, False),
        _rnn._fitted(lstm, torch.float32, 1200, 1092, 0, 4, True, 0.0, True, 9, 12, 108, False),
        _rnn._fitted(tanh, torch.float32, 256, 384, 0, 2, True, 0.0, True, 9, 12, 108, False),
    ):
        assert f["workspace"] is None and f["backward_workspace"] is None
    assert _rnn._fitted(lstm, torch.float32, 1200, 1092, 0, 4, True, 0.0, False, 9, 12, 108, False) is None


def test_a_unidirectional_lstm_outside_the_table_takes_the_fitted_sizes():
    # GPU (fixtures/run/rnn_sweep_uni_h200.jsonl.xz): fp32 LSTM, 256 inputs, 512 hidden, one layer,
    # batch 8 of 50 steps: training workspace 19349824 (= inference's and backward's), reserve 4096256
    with vramscope.capture(gpu="h200") as cap:
        lstm = nn.LSTM(256, 512).cuda()
        x = torch.empty(50, 8, 256, device="cuda", requires_grad=True)
        # LSTM.forward's zero h0 and c0, then output, hy, cy, the workspace and the reserve
        _, count, req = _counted(lambda: lstm(x))
        state = 8 * 512 * 4
        assert (count, req) == (2 + 5, 4 * state + 50 * 8 * 512 * 4 + 19349824 + 4096256)
        # eval: cuDNN's inference workspace, no reserve
        lstm.eval()
        with torch.no_grad():
            _, count, req = _counted(lambda: lstm(x))
        assert (count, req) == (2 + 4, 4 * state + 50 * 8 * 512 * 4 + 19349824)
    assert cap.report()["unmeasured"] == []


def test_the_unidirectional_fitted_sizes_match_the_sweep():
    from vramscope import _rnn

    gru, lstm = _rnn.MODES["gru"], _rnn.MODES["lstm"]
    # GPU, fit set: fp32 GRU, 256 inputs, 512 hidden, 2 layers, packed lengths 50, 41, 36, 34, 32, 31,
    # 29, 27 (280 steps): every workspace 29606144, reserve 7454976
    f = _rnn._fitted(gru, torch.float32, 256, 512, 0, 2, False, 0.0, True, 8, 50, 280, True)
    assert f == {"workspace": 29606144, "reserve": 7454976, "backward_workspace": 29606144}
    # GPU, held out, longest sequences past 256 steps (the gates' buffer stops at 256 * batch rows):
    # fp32 LSTM, 725 inputs, 454 hidden, 4 layers, packed batch 96 of 279 steps, 26052 in all
    f = _rnn._fitted(lstm, torch.float32, 725, 454, 0, 4, False, 0.0, True, 96, 279, 26052, True)
    assert f == {"workspace": 244610208, "reserve": 1088140192, "backward_workspace": 244610208}
    # fp16 GRU, 730 inputs, 864 hidden, one layer, unpacked batch 59 of 288 steps
    f = _rnn._fitted(gru, torch.float16, 730, 864, 0, 1, False, 0.0, True, 59, 288, 59 * 288, False)
    assert f == {"workspace": 184227744, "reserve": 176173312, "backward_workspace": 184227744}
    f = _rnn._fitted(gru, torch.float16, 730, 864, 0, 1, False, 0.0, False, 59, 288, 59 * 288, False)
    assert f == {"workspace": 149632032}


def test_the_unidirectional_fitted_sizes_hold_only_in_their_domain():
    from vramscope import _rnn

    gru, lstm, tanh = _rnn.MODES["gru"], _rnn.MODES["lstm"], _rnn.MODES["rnn_tanh"]
    f32 = torch.float32
    # unpacked multi-layer training depends on cuDNN's wavefront chunk (`_wavefront_steps`: known to
    # batch 4,096, not past it), and packed multi-layer RNN_TANH training without dropout is not
    # linear in batch and steps on the GPU; their inference is (their reserve is: `_reserve_only`)
    assert (
        _rnn._fitted(gru, f32, 256, 512, 0, 2, False, 0.0, True, 4097, 50, 204850, False)["workspace"] is None
    )
    assert (
        _rnn._fitted(gru, f32, 256, 512, 0, 2, False, 0.0, True, 4096, 50, 204800, False)["workspace"]
        is not None
    )
    assert _rnn._fitted(gru, f32, 256, 512, 0, 2, False, 0.0, False, 8, 50, 400, False) is not None
    assert _rnn._fitted(gru, f32, 256, 512, 0, 2, False, 0.25, True, 8, 50, 400, False) is not None
    assert _rnn._fitted(tanh, f32, 256, 512, 0, 2, False, 0.0, True, 8, 50, 281, True)["workspace"] is None
    # unpacked multi-layer LSTM: the same past batch 4,096 (an LSTM's reserve is not kept alone)
    assert _rnn._fitted(lstm, f32, 1000, 512, 0, 2, False, 0.0, True, 4097, 50, 204850, False) is None
    assert _rnn._fitted(lstm, f32, 256, 256, 0, 2, False, 0.0, True, 4097, 50, 204850, False) is None
    assert _rnn._fitted(lstm, f32, 256, 512, 0, 2, False, 0.0, True, 8, 50, 400, False) is not None
    # RNN.cpp's persistent algorithms: small hidden sizes, and float16 one-layer LSTMs of batch 8k;
    # an LSTM of hidden <= 192 takes `_fitted_small_h` (in training with inputs no wider than the
    # hidden size, at most 282 steps), a GRU of hidden <= 192 nothing
    assert _rnn._fitted(gru, f32, 256, 192, 0, 1, False, 0.0, False, 8, 50, 400, False) is None
    assert _rnn._fitted(lstm, f32, 256, 192, 0, 1, False, 0.0, False, 8, 50, 400, False) is not None
    assert _rnn._fitted(lstm, f32, 256, 192, 0, 1, False, 0.0, True, 8, 50, 400, False) is None
    assert _rnn._fitted(lstm, f32, 192, 192, 0, 1, False, 0.0, False, 8, 283, 2264, False) is None
    # (the float16 one-layer LSTM at batch 8 runs CUDNN_RNN_ALGO_PERSIST_STATIC: `_fitted_persist_static`,
    # at least 224 tokens in training; the uni sweep measured this one: 20,406,592 bytes)
    assert _rnn._fitted(lstm, torch.float16, 256, 512, 0, 1, False, 0.0, False, 8, 50, 400, False) == {
        "workspace": 20406592
    }
    assert _rnn._fitted(lstm, torch.float16, 256, 512, 0, 1, False, 0.0, True, 8, 7, 56, False) is None
    assert _rnn._fitted(lstm, torch.float16, 256, 512, 0, 1, False, 0.0, False, 9, 50, 450, False) is not None
    # longer than the sweeps and the probes measured (LSTM and GRU: unpacked 4,096 steps, packed 2,048,
    # packed training with dropout 400; RNN_TANH/RELU 400 in training, 800 in inference)
    assert _rnn._fitted(lstm, f32, 256, 512, 0, 1, False, 0.0, True, 8, 4096, 32768, False) is not None
    assert _rnn._fitted(lstm, f32, 256, 512, 0, 1, False, 0.0, True, 8, 4097, 32776, False) is None
    assert _rnn._fitted(lstm, f32, 256, 512, 0, 1, False, 0.0, True, 8, 2048, 16384, True) is not None
    assert _rnn._fitted(lstm, f32, 256, 512, 0, 1, False, 0.0, True, 8, 2049, 16392, True) is None
    assert _rnn._fitted(lstm, f32, 256, 512, 0, 1, False, 0.0, False, 8, 2049, 16392, True) is None
    assert _rnn._fitted(lstm, f32, 256, 512, 0, 2, False, 0.2, True, 8, 400, 3200, True) is not None
    assert _rnn._fitted(lstm, f32, 256, 512, 0, 2, False, 0.2, True, 8, 401, 3208, True) is None
    assert _rnn._fitted(tanh, f32, 256, 512, 0, 2, False, 0.2, True, 8, 401, 3208, False) is None
    assert _rnn._fitted(lstm, f32, 256, 512, 0, 1, False, 0.0, False, 8, 401, 3208, False) is not None
    # packed multi-layer training past the wavefront chunk's last batch: `a` where f with k = S is at
    # most a (wide inputs make f larger), else the reserve alone (GRU) or nothing (LSTM)
    assert _rnn._fitted(gru, f32, 256, 512, 0, 2, False, 0.0, True, 4097, 50, 204850, True)["workspace"]
    assert (
        _rnn._fitted(gru, f32, 2000, 512, 0, 2, False, 0.0, True, 4097, 50, 204850, True)["workspace"] is None
    )


def test_a_projected_unidirectional_lstm_takes_the_fitted_inference_workspace():
    from vramscope import _rnn

    lstm = _rnn.MODES["lstm"]
    # GPU, held out: fp16 LSTM, 888 inputs, 176 hidden projected to 144, 2 layers, unpacked batch
    # 100 of 263 steps (RNN.cpp: projections always take the standard algorithm, whatever the
    # hidden size; the gates' buffer stops at 256 steps): inference workspace 119002208
    args = (888, 176, 144, 2, False, 0.0)
    f = _rnn._fitted(lstm, torch.float16, *args, False, 100, 263, 100 * 263, False)
    assert f == {"workspace": 119002208}
    # fp32, 990 inputs, 1032 hidden projected to 754, 4 layers, unpacked batch 79 of 204 steps
    f = _rnn._fitted(lstm, torch.float32, 990, 1032, 754, 4, False, 0.0, False, 79, 204, 79 * 204, False)
    assert f == {"workspace": 606903744}
    # training with inputs wider than the hidden size: its workspace exceeds inference's by a form
    # not fitted (GPU: fixtures/run/rnn_sweep_proj_h200.jsonl.xz)
    assert _rnn._fitted(lstm, torch.float16, *args, True, 100, 263, 100 * 263, False) is None


def test_a_projected_lstm_language_model_runs_cudnn_with_the_fitted_workspace_and_reserve():
    # blind32/af05's LSTM; GPU (per-op truth, fixtures/run/truth_blind32_h200.tar.xz):
    # _cudnn_rnn_flatten_weight one zeroed buffer of 23134208 bytes, the w_hr matrices after each
    # layer's w_ih and w_hh, the biases after every matrix; _cudnn_rnn 6 allocations, 713491200 bytes
    # (x copy, output, hy 65536, cy 262144, workspace 235012608, reserve 452985088);
    # _cudnn_rnn_backward 11, 552535040 bytes
    with vramscope.capture(gpu="h200") as cap:
        lstm = nn.LSTM(512, 1024, num_layers=2, batch_first=True, proj_size=256).cuda()
        assert torch.cuda.memory_allocated() == 23134208
        offsets = [p.storage_offset() for p in lstm._flat_weights]
        layer0 = [0, 2097152, 5767168, 5771264, 3145728]
        assert offsets == [*layer0, 3407872, 4456448, 5775360, 5779456, 5505024]
        x = torch.empty(32, 256, 512, device="cuda", requires_grad=True)
        h = (torch.zeros(2, 32, 256, device="cuda"), torch.zeros(2, 32, 1024, device="cuda"))
        (out, (hy, cy)), count, req = _counted(lambda: lstm(x, h))
        assert (count, req) == (6, 713491200)
        assert (out.shape, hy.shape, cy.shape) == ((32, 256, 256), (2, 32, 256), (2, 32, 1024))
        # the head's gradient: contiguous batch-first, copied time-major; then AccumulateGrad copies
        # dx (batch-first, time-major strides) into x's layout
        g = torch.empty(32, 256, 256, device="cuda")
        _, count, req = _counted(lambda: out.backward(g))
        assert (count, req) == (11 + 1, 552535040 + 16777216)
    assert cap.report()["unmeasured"] == []


def test_the_projected_fitted_sizes_match_the_sweep():
    from vramscope import _rnn

    lstm, f32, f16 = _rnn.MODES["lstm"], torch.float32, torch.float16
    # GPU (fixtures/run/rnn_sweep_proj_h200.jsonl.xz), held out: fp32, 657 inputs, 816 hidden projected
    # to 372, one layer, bidirectional, unpacked batch 16 of 83 steps
    f = _rnn._fitted(lstm, f32, 657, 816, 372, 1, True, 0.0, True, 16, 83, 16 * 83, False)
    assert f == {"workspace": 115341376, "reserve": 55967488, "backward_workspace": 115341376}
    # fp16, 46 inputs, 162 hidden projected to 117, 4 layers, bidirectional, batch 46 of 76 steps
    f = _rnn._fitted(lstm, f16, 46, 162, 117, 4, True, 0.0, True, 46, 76, 46 * 76, False)
    assert f == {"workspace": 89744800, "reserve": 67710784, "backward_workspace": 89744800}
    # fp32, 502 inputs, 738 hidden projected to 512, 4 layers, dropout 0.3, batch 116 of 130 steps:
    # the inference workspace 384452448, training's E * T * h more
    args = (502, 738, 512, 4, False, 0.3)
    f = _rnn._fitted(lstm, f32, *args, True, 116, 130, 116 * 130, False)
    assert f == {"workspace": 428968608, "reserve": 1328367296, "backward_workspace": 428968608}
    assert _rnn._fitted(lstm, f32, *args, False, 116, 130, 116 * 130, False) == {"workspace": 384452448}
    # fit set: fp32, 256 inputs, 512 hidden projected to 128, 2 layers, bidirectional, dropout 0.25,
    # packed lengths 200, 88, 2
    f = _rnn._fitted(lstm, f32, 256, 512, 128, 2, True, 0.25, True, 3, 200, 290, True)
    assert f == {"workspace": 55697664, "reserve": 16074496, "backward_workspace": 55697664}


def test_the_projected_fitted_sizes_hold_only_in_their_domain():
    from vramscope import _rnn

    lstm, f32 = _rnn.MODES["lstm"], torch.float32
    # GPU (fixtures/run/rnn_sweep_proj_h200.jsonl.xz): a projection of nearly the hidden size, unpacked,
    # trains with more workspace than inference at 1 or 2 steps and past 256 (512 hidden, 511
    # projected); within 3 to 256 steps, and at half the hidden size or less, it does not
    assert _rnn._fitted(lstm, f32, 256, 512, 511, 2, False, 0.0, True, 32, 2, 64, False) is None
    assert _rnn._fitted(lstm, f32, 256, 512, 511, 2, False, 0.0, True, 8, 300, 2400, False) is None
    assert _rnn._fitted(lstm, f32, 256, 512, 511, 2, False, 0.0, True, 8, 50, 400, False) is not None
    assert _rnn._fitted(lstm, f32, 256, 512, 256, 2, False, 0.0, True, 32, 2, 64, False) is not None
    # inputs wider than the hidden size: training fitted for one unidirectional layer only
    assert _rnn._fitted(lstm, f32, 700, 512, 128, 2, False, 0.0, True, 8, 50, 400, False) is None
    assert _rnn._fitted(lstm, f32, 700, 512, 128, 1, True, 0.0, True, 8, 50, 400, False) is None
    assert _rnn._fitted(lstm, f32, 700, 512, 128, 1, False, 0.0, True, 8, 50, 400, False) is not None
    assert _rnn._fitted(lstm, f32, 700, 512, 128, 2, False, 0.0, False, 8, 50, 400, False) is not None


def test_a_projected_one_layer_lstm_with_wide_inputs_trains_with_the_second_form():
    from vramscope import _rnn

    lstm, f32 = _rnn.MODES["lstm"], torch.float32
    # GPU (fixtures/run/rnn_sweep_proj_h200.jsonl.xz), fit set: fp32, 2000 inputs, 512 hidden projected
    # to 128, one layer, unpacked batch 32 of 50 steps: inference workspace 56644096, training and
    # backward 73200128, reserve 20480256
    f = _rnn._fitted(lstm, f32, 2000, 512, 128, 1, False, 0.0, True, 32, 50, 1600, False)
    assert f == {"workspace": 73200128, "reserve": 20480256, "backward_workspace": 73200128}
    assert _rnn._fitted(lstm, f32, 2000, 512, 128, 1, False, 0.0, False, 32, 50, 1600, False) == {
        "workspace": 56644096
    }
    # packed lengths 200, 104, 12: training workspace 29924352, inference 29356288
    f = _rnn._fitted(lstm, f32, 2000, 512, 128, 1, False, 0.0, True, 3, 200, 316, True)
    assert f == {"workspace": 29924352, "reserve": 4045056, "backward_workspace": 29924352}


def test_a_short_multi_layer_unidirectional_gru_takes_the_second_form():
    from vramscope import _rnn

    gru = _rnn.MODES["gru"]
    # GPU, held out: fp32 GRU, 88 inputs, 592 hidden, 3 layers, no dropout, unpacked batch 109 of
    # 2 steps: training workspace 52910016 (= backward's), reserve 10324736; at 7 steps or fewer the
    # training workspace is max(a, f) with more layers too whatever `_wavefront_steps`' chunk, beyond it
    # by the chunk, unknown past batch 4,096
    f = _rnn._fitted(gru, torch.float32, 88, 592, 0, 3, False, 0.0, True, 109, 2, 218, False)
    assert f == {"workspace": 52910016, "reserve": 10324736, "backward_workspace": 52910016}
    assert (
        _rnn._fitted(gru, torch.float32, 88, 592, 0, 3, False, 0.0, True, 4097, 50, 204850, False)[
            "workspace"
        ]
        is None
    )


def test_a_gru_under_autocast_runs_cudnn_in_half_over_a_new_flat_buffer():
    # AutocastRNN.cpp's _cudnn_rnn_cast_reflatten (blind73/bu03 on an H200: its first step's peak,
    # 2,838,292,992 bytes, is the twin's to the byte): the fp32 weights copied into a new zeroed fp16
    # flat buffer, the input and hidden state cast to fp16, the fp16 problem's measured reserve
    with vramscope.capture(gpu="h200") as cap:
        gru = nn.GRU(512, 768, num_layers=3, bidirectional=True, dropout=0.2, batch_first=True).cuda()
        x = torch.randn(64, 400, 512, device="cuda")
        n_weights = sum(p.numel() for p in gru.parameters())
        with torch.autocast("cuda", dtype=torch.float16):
            (out, h), _count, req = _counted(lambda: gru(x))
        assert out.dtype == torch.float16 and h.dtype == torch.float16
        # flat buffer, the casts of x and h0, output, hy, reserve (1,592,525,056 bytes measured), ...
        assert req >= 2 * n_weights + 2 * x.numel() + 1592525056
        out.float().sum().backward()
        assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in gru.parameters())
    assert not any("autocast" in w for w in cap.warned)


def test_an_autocast_lstm_called_per_step_adds_its_weight_gradients_out_of_place_once():
    # blind208/gz05's H200 history (EfficientZero's value-prefix LSTM(576, 512) called once per
    # unroll step under bf16 autocast): `_cudnn_rnn_cast_reflatten` copies `param.view_as(param_to)`
    # into (numel, 1) tensors over the fp16 buffer (cudnn/RNN.cpp `_viewOrCopyOneParam`), so the
    # engine's input buffer adds the second call's fp32 weight gradient out of place (a view's
    # storage has two holders) and the later ones in place: one more allocation per parameter
    with vramscope.capture(gpu="h200"):
        lstm = nn.LSTM(576, 512).cuda()
        x = torch.randn(3, 1, 512, 576, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            hc, outs = None, []
            for k in range(3):
                out, hc = lstm(x[k], hc)
                outs.append(out)
        loss = sum(o.float().sum() for o in outs)
        _, count, req = _counted(loss.backward)
        weights = sum(p.numel() for p in lstm.parameters())
        # without the view: 36 allocations, 179,471,876 bytes
        assert (count, req) == (40, 179471876 + 4 * weights)
        assert all(p.grad.shape == p.shape for p in lstm.parameters())


def test_a_bf16_lstm_outside_one_flat_buffer_returns_a_new_weight_buffer_after_its_reserve():
    # blind139/ei05's H200 per-op truth (the Relation Network's question LSTM held in bf16, its
    # weights not flattened): _cudnn_rnn made 7 allocations, 17,394,688 bytes (x copy 184,320,
    # output, hy, cy, workspace 12,587,776, reserve 3,686,656, then the new flat weight_buf 165,888)
    with vramscope.capture(gpu="h200") as cap:
        lstm = nn.LSTM(32, 128, batch_first=True).to("cuda", torch.bfloat16)
        x = torch.randn(64, 45, 32, device="cuda", dtype=torch.bfloat16)
        h = (torch.zeros(1, 64, 128, device="cuda", dtype=torch.bfloat16),) * 2
        _, count, req = _counted(lambda: lstm(x, h))
        assert (count, req) == (7, 17394688)
    assert cap.report()["unmeasured"] == []


def test_fused_gru_cell_backward_reduces_each_bias_gradient_with_its_global_buffer():
    # blind113/di01's H200 per-op truth: `_thnn_fused_gru_cell_backward` of a (16421, 64) GRUCell
    # with biases made 9 allocations, 79,956,240 bytes requested: its 5 outputs (29,427,968 bytes)
    # and each gate gradient's `sum(0)`'s global buffer and semaphores
    with vramscope.capture(gpu="h200"):
        grad_hy = torch.empty(16421, 64, device="cuda")
        workspace = torch.empty(16421, 320, device="cuda")
        _, count, req = _counted(
            lambda: torch.ops.aten._thnn_fused_gru_cell_backward(grad_hy, workspace, True)
        )
    assert (count, req) == (9, 79956240)


def test_fused_lstm_cell_backward_reduces_the_bias_gradient_with_its_global_buffer():
    # blind340/mc03's H100 per-op truth: `_thnn_fused_lstm_cell_backward_impl` of a (269322, 20)
    # LSTMCell with biases and no grad_cy made 5 allocations, 129,356,008 bytes requested: its 3
    # outputs and `grad_gates.sum(0)`'s global buffer (21,626,880) and semaphores
    with vramscope.capture(gpu="h100"):
        grad_hy = torch.empty(269322, 20, device="cuda")
        cx = torch.empty(269322, 20, device="cuda")
        cy = torch.empty(269322, 20, device="cuda")
        workspace = torch.empty(269322, 80, device="cuda")
        _, count, req = _counted(
            lambda: torch.ops.aten._thnn_fused_lstm_cell_backward_impl(grad_hy, None, cx, cy, workspace, True)
        )
    assert (count, req) == (5, 129356008)


def test_autocast_lstm_weight_copies_backward_through_copy_alone():
    # blind123/ds02's H200 history: under autocast each cuDNN LSTM call copies its weights into a new
    # fp16 flat buffer through tensors `set_` over its storage (AutocastRNN.cpp's
    # copy_weights_to_flat_buf_views), so backward takes `_cudnn_rnn_backward`'s dw and a float
    # gradient per weight: no buffer-sized CopySlices scratch, no half clones of the weights' gradients
    with vramscope.capture(gpu="h200"):
        lstm = torch.nn.LSTM(275, 256).cuda()
        x = torch.empty(1, 96, 275, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out, _ = lstm(x)
        torch.cuda.memory._record_memory_history()
        out.float().sum().backward()
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
        sizes = [e["size"] for e in trace if e["action"] == "alloc"]
        assert sizes.count(545_792 * 2) == 1
        assert 1024 * 256 * 2 not in sizes and 1024 * 275 * 2 not in sizes
        assert 1024 * 275 * 4 in sizes and 1024 * 256 * 4 in sizes


def test_a_gru_cell_under_autocast_casts_its_parameters_once_right_to_left():
    # autocast_mode.cpp: `gru_cell` is lower_precision_fp, so its tensors are cast before the cell
    # runs, right to left (b_hh, b_ih, w_hh, w_ih), the parameters' casts cached for the region;
    # blind141/ek04's H200 history: 384, 384, 24,576, 24,576 bytes at the first of three message
    # steps, no cast at the later ones (the twin cast each weight again inside each matmul before)
    with vramscope.capture(gpu="h200"):
        cell = nn.GRUCell(8, 16).cuda()
        x = torch.empty(4, 8, device="cuda", dtype=torch.float16)
        h = torch.empty(4, 16, device="cuda", dtype=torch.float16)
        sizes = []
        with torch.autocast("cuda", dtype=torch.float16):
            for _ in range(3):
                torch.cuda.memory._record_memory_history(max_entries=10_000)
                before = len(torch.cuda.memory._snapshot()["device_traces"][0])
                h = cell(x, h)
                trace = torch.cuda.memory._snapshot()["device_traces"][0][before:]
                torch.cuda.memory._record_memory_history(enabled=None)
                sizes.append([e["size"] for e in trace if e["action"] == "alloc"])
        assert h.dtype == torch.float16
        assert sizes[0][:4] == [48 * 2, 48 * 2, 48 * 16 * 2, 48 * 8 * 2]
        # then the two gate products, the fused kernel's workspace and hy
        assert sizes[1] == sizes[2] == [4 * 48 * 2, 4 * 48 * 2, 4 * 80 * 2, 4 * 16 * 2]


def test_an_autocast_gru_gets_its_dropout_state_before_the_casts_and_casts_hx_before_the_input():
    # blind150/et04's H200 history (a 2-layer GRU with dropout under bf16 autocast): RNN.cpp's
    # `_cudnn_impl` draws the seed (8 bytes) and makes the dropout state (6,488,064 bytes) before
    # `at::_cudnn_rnn`, whose autocast kernel then zeroes the fp16 flat buffer and casts the call's
    # arguments right to left: hx (655,360 bytes) before the input (5,716,992)
    with vramscope.capture(gpu="h200"):
        gru = nn.GRU(32, 64, num_layers=2, dropout=0.5).cuda()
        x = torch.empty(10, 4, 32, device="cuda")
        h0 = torch.zeros(2, 4, 64, device="cuda")
        torch.cuda.memory._record_memory_history()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            gru(x, h0)
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
        sizes = [e["size"] for e in trace if e["action"] == "alloc"]
        assert sizes[:2] == [8, 6_488_064]
        assert sizes[3:5] == [2 * 4 * 64 * 2, 10 * 4 * 32 * 2]


def test_pack_padded_sequence_frees_its_blocks_first_to_last():
    # blind150/et04's H200 history: the std::vector of contiguous blocks is destroyed from its first
    # (longest batch) block on
    with vramscope.capture(gpu="h200"):
        x = torch.empty(3, 5, 8, device="cuda")
        torch.cuda.memory._record_memory_history()
        torch.ops.aten._pack_padded_sequence(x, torch.tensor([5, 4, 2]), True)
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
        frees = [e["size"] for e in trace if e["action"] == "free_completed"]
        # blocks: 2 steps x 3, 2 steps x 2 (the last step of one sequence is contiguous: a view)
        assert frees[:2] == [2 * 3 * 8 * 4, 2 * 2 * 8 * 4]


def test_an_lstm_under_inference_mode_takes_the_measured_workspace():
    # blind174/fr05's H200 per-op truth (DeepAR's sampled rollout): under inference_mode the dispatch
    # mode sees the whole `lstm` op; one step of the 3-layer LSTM of 128 over 51,200 sample paths made 4
    # allocations, 1,401,204,992 bytes (output 26,214,400, hy and cy 78,643,200 each, workspace
    # 1,217,704,192; a (51200, 1, 54) input needs no time-major copy). Unmeasured before
    # (validation/run/rnn_table.py now reads such lines): fr05's forecast phase was 89% under.
    with vramscope.capture(gpu="h200") as cap:
        lstm = nn.LSTM(54, 128, num_layers=3, dropout=0.1, batch_first=True).cuda().eval()
        x = torch.empty(51200, 1, 54, device="cuda")
        h = (torch.zeros(3, 51200, 128, device="cuda"), torch.zeros(3, 51200, 128, device="cuda"))
        with torch.inference_mode():
            _, count, req = _counted(lambda: lstm(x, h))
        assert (count, req) == (4, 1401204992)
    assert cap.report()["unmeasured"] == []


def test_the_small_h_sizes_agree_with_the_sweeps_persistent_lstms():
    # the sweeps' unpacked unidirectional LSTMs that ran CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H
    # forward (`algo_fwd` 3): inference exact or under by an alignment padding (at most 220 bytes)
    import json
    import lzma

    from conftest import FIXTURES
    from vramscope import _rnn

    seen = exact = 0
    for name in ("rnn_sweep_uni_h200.jsonl.xz", "rnn_sweep_h200.jsonl.xz"):
        for line in lzma.open(FIXTURES / "run" / name, "rt"):
            r = json.loads(line)
            if r.get("set") == "meta" or r["mode"] != "lstm" or r["algo_fwd"] != 3:
                continue
            if r["bidirectional"] or r["lengths"] is not None:
                continue
            b, s = r["batch"], r["seq_length"]
            args = (r["input_size"], r["hidden_size"], 0, r["num_layers"], False, r["dropout"])
            got = _rnn._fitted(
                _rnn.MODES["lstm"], getattr(torch, r["dtype"]), *args, False, b, s, b * s, False
            )
            assert 0 <= r["infer_workspace"] - got["workspace"] <= 220
            seen += 1
            exact += got["workspace"] == r["infer_workspace"]
            trained = _rnn._fitted(
                _rnn.MODES["lstm"], getattr(torch, r["dtype"]), *args, True, b, s, b * s, False
            )
            if trained is not None:
                measured = (r["train_workspace"], r["reserve"], r["backward_workspace"])
                fitted = (trained["workspace"], trained["reserve"], trained["backward_workspace"])
                assert all(0 <= m - f <= 220 for m, f in zip(measured, fitted, strict=True))
    assert (seen, exact) == (117, 107)


def test_a_small_hidden_lstm_outside_the_table_takes_the_persistent_small_h_sizes():
    # RNN.cpp `use_rnn_persist_small_h`: an unpacked LSTM of hidden <= 192 runs
    # CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H forward, <= 128 backward too; before `_fitted_small_h`
    # such a problem outside the table was unmeasured (blind174/fr04 and fr05: 18% and 89% under in
    # peak allocated). The TFT's 2-layer LSTM of 160 at batch 128 over 96 steps with dropout 0.1:
    from vramscope import _rnn

    lstm = _rnn.MODES["lstm"]
    t = 128 * 96
    c0 = 256 + 4 * (4 * 160 * 160 * 2 * 2) + 8 * (1 << 20) * 2
    infer = c0 + 1024 + 4 * (128 * 2 * 8 * 160 + t * (21 * 160 + 160))
    assert _rnn._fitted(lstm, torch.float32, 160, 160, 0, 2, False, 0.1, False, 128, 96, t, False) == {
        "workspace": infer
    }
    got = _rnn._fitted(lstm, torch.float32, 160, 160, 0, 2, False, 0.1, True, 128, 96, t, False)
    assert got["workspace"] == infer + 4 * t * 160
    # backward (hidden 160 > 128): the standard algorithm's training workspace
    std = c0 + 1024 + 4 * (128 * 2 * 10 * 160 + t * 4 * 160 + t * (160 + 160)) + 4 * t * 160
    assert got["backward_workspace"] == std
    with vramscope.capture(gpu="h200") as cap:
        m = nn.LSTM(160, 160, num_layers=2, dropout=0.1, batch_first=True).cuda()
        out, _ = m(torch.empty(128, 96, 160, device="cuda"))
        out.sum().backward()
    assert cap.report()["unmeasured"] == []


def test_an_exported_lstm_node_runs_cudnn_with_the_measured_inference_workspace():
    # blind265/jf04's H200 memory history: `ep.module()` of an eval-mode export runs its
    # `aten.lstm.input` node through `lstm_cudnn` (RNN.cpp), not the per-step matmuls: at batch 16
    # of 200 steps the zero h0 and c0 (131,072 bytes each), the input's time-major copy 3,276,800,
    # the output 13,107,200, hy and cy, and the workspace 167,903,616
    with vramscope.capture(gpu="h200") as cap:
        lstm = nn.LSTM(256, 512, num_layers=2, batch_first=True, bidirectional=True).cuda().eval()
        x = torch.empty(16, 256, 200, device="cuda").transpose(1, 2)
        served = torch.export.export(lstm, (x,)).module()
        with torch.inference_mode():
            _, count, req = _counted(lambda: served(x))
        assert (count, req) == (7, 4 * 131072 + 3276800 + 13107200 + 167903616)
    assert cap.report()["unmeasured"] == []


def test_a_bidirectional_small_hidden_lstm_keeps_its_reserve_for_the_backward():
    # timm's Sequencer2D (blind270/jk01): bidirectional LSTMs of 48 over 192 inputs, which RNN.cpp's
    # `use_rnn_persist_small_h` sends to the persistent small-h algorithm whatever the directions;
    # the reserve, saved for the backward, is the bidirectional form's (exact or under by at most 180
    # bytes on all 2,441 bidirectional problems of rnn_sweep_h200.jsonl.xz, the 253 small-h ones
    # among them); before, it was 0. The workspace: `_fitted_small_h_bidir`, the H100's 218,988,800
    # bytes for this problem (fixtures/run/rnn_bidir_small_h_h100.jsonl.xz)
    with vramscope.capture(gpu="h200") as cap:
        lstm = nn.LSTM(192, 48, bidirectional=True, batch_first=True).cuda().half()
        x = torch.empty(1536, 32, 192, device="cuda", dtype=torch.float16, requires_grad=True)
        # LSTM.forward's zero h0 and c0, then the time-major copy of x, output, hy, cy, the workspace
        # and the reserve
        _, count, req = _counted(lambda: lstm(x))
        state, copy, output = 2 * 1536 * 48 * 2, 1536 * 32 * 192 * 2, 1536 * 32 * 96 * 2
        reserve = 256 + 2 * 1536 * 32 * 2 * 5 * 48
        assert (count, req) == (2 + 6, 4 * state + copy + output + 218988800 + reserve)
    assert cap.report()["unmeasured"] == []


def test_a_bidirectional_small_hidden_lstm_takes_the_measured_persistent_sizes():
    # blind270/jk01 (timm Sequencer2D-S: bidirectional LSTMs of hidden 48 and 96 over rows and columns,
    # fp16 autocast) named its four cuDNN problems unmeasured and peaked 25.5% under the GPU. The
    # session-61 probe (validation/run/probes/rnn_bidir_small_h_probe_s61.py) measured them and a grid
    # of 420 around them: `_fitted_small_h_bidir` gives every figure of all 424 exactly
    import json
    import lzma

    from conftest import FIXTURES
    from vramscope import _rnn

    seen = 0
    for line in lzma.open(FIXTURES / "run" / "rnn_bidir_small_h_h100.jsonl.xz", "rt"):
        r = json.loads(line)
        if r.get("set") == "meta":
            continue
        b, s, dtype = r["batch"], r["seq_length"], getattr(torch, r["dtype"])
        args = (r["input_size"], r["hidden_size"], 0, 1, True, 0.0)
        lstm = _rnn.MODES["lstm"]
        infer = _rnn._fitted(lstm, dtype, *args, False, b, s, b * s, False)
        assert infer == {"workspace": r["infer_workspace"]}
        trained = _rnn._fitted(lstm, dtype, *args, True, b, s, b * s, False)
        assert trained == {
            "workspace": r["train_workspace"],
            "reserve": r["reserve"],
            "backward_workspace": r["backward_workspace"],
        }
        seen += 1
    assert seen == 424
    # jk01's first problem end to end: batch 1536 rows of 32 steps, input 192, hidden 48, fp16
    with vramscope.capture(gpu="h200") as cap:
        m = nn.LSTM(192, 48, bidirectional=True, batch_first=True).cuda()
        x = torch.empty(1536, 32, 192, device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            out, _ = m(x)
        out.float().sum().backward()
    assert cap.report()["unmeasured"] == []


def test_the_h100s_first_cudnn_rnn_placement_probe():
    # validation/run/probes/km67_lstm_flatten_first_cudnn_placement_probe.py, its `plain` case on the
    # H100 (fixtures/run/probes/km67_lstm_flatten_first_cudnn_placement_probe_h100.txt), the
    # machine's first process to use cuDNN's RNN (VRAMSCOPE_JIT_CACHE_COLD): the LSTM's first cuDNN
    # call maps the ptxjit library, the driver's 6 + 2 MiB and cuDNN's ops and adv libraries before
    # its flat buffer, which lies at B-504 (driver address-space rule 18). In a fresh process, as on
    # the GPU: the address space is the process's.
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    probe = root / "validation/run/probes/km67_lstm_flatten_first_cudnn_placement_probe.py"
    gpu = (root / "fixtures/run/probes/km67_lstm_flatten_first_cudnn_placement_probe_h100.txt").read_text()
    want = [line for line in gpu.splitlines() if line.startswith("plain seg ")]
    run = [sys.executable, "-m", "vramscope", "run", "--gpu", "h100", "--quiet", str(probe), "plain"]
    env = {**os.environ, "VRAMSCOPE_JIT_CACHE_COLD": "1"}
    out = subprocess.run(run, capture_output=True, text=True, env=env, timeout=600)
    assert [line for line in out.stdout.splitlines() if line.startswith("plain seg ")] == want
    # the same case run again on that machine (its JIT cache warm: no ptxjit library, the flat weights at
    # B-440), the twin's default (fixtures/run/probes/pa68_km67_plain_twice_h100.txt, the second run)
    twice = (root / "fixtures/run/probes/pa68_km67_plain_twice_h100.txt").read_text()
    warm = [line for line in twice.splitlines() if line.startswith("plain seg ")][3:]
    out = subprocess.run(run, capture_output=True, text=True, env=os.environ, timeout=600)
    assert [line for line in out.stdout.splitlines() if line.startswith("plain seg ")] == warm


def test_blind321_sincnet_three_layer_lstm_problems_are_measured():
    from vramscope import _rnn

    # blind321/lj03 (SincNet front end + 3-layer nn.LSTM of 384 over 60 inputs, no dropout): float16
    # under bf16 autocast (AutocastRNN.cpp casts to kHalf), training at 256 x 937 steps past
    # `_fitted_uni`'s 400, inference at 256 x 1,174 past its 800; both had been left out (the H100
    # peaked 3,785,177,600 bytes above the twin in training). Measured by the H100 probe
    # validation/run/probes/lj70_lj03_lstm3_fp16_long_workspace_probe.py (_h100.out): the reserve and
    # the inference workspace are the fitted forms' (`_uni_reserve`, the inference form) to the byte.
    # The formula now gives both (`_wavefront_steps`: k = 32, chunks of 8 over 3 layers).
    lstm = _rnn.MODES["lstm"]
    f = _rnn._fitted(lstm, torch.float16, 60, 384, 0, 3, False, 0.0, True, 256, 937, 256 * 937, False)
    assert f == {"workspace": 654264576, "reserve": 3131769088, "backward_workspace": 654264576}
    p = _rnn._problems()[("lstm", "float16", 60, 384, 0, 3, False, 256, 937, None, True)]
    reserve = _rnn._uni_reserve(lstm, 2, 384, 3, 0.0, 256, 937, 256 * 937)
    assert (p["workspace"], p["reserve"], p["backward_workspace"]) == (654264576, reserve, 654264576)
    assert reserve == 3131769088
    p = _rnn._problems()[("lstm", "float16", 60, 384, 0, 3, False, 256, 1174, None, False)]
    assert p["workspace"] == 505358592


def test_unpacked_lstms_and_grus_past_400_steps_take_the_fitted_sizes():
    # the H100 probe validation/run/probes/lead70_rnn_long_seq_sweep_probe.py (
    # fixtures/run/probes/lead70_rnn_long_seq_sweep_probe_h100.jsonl): 144 unidirectional unpacked
    # LSTMs and GRUs, float16 and float32, hidden 256/512/1,024, inputs 64/512, 1 and 2 layers, batch
    # 64 over 512, 1,024 and 2,048 steps, past `_fitted_uni`'s former 400 (training) and 800 steps.
    # Every figure is the fitted forms': one layer f over the whole sequence, two layers f with
    # `_wavefront_steps`' k = 24 (chunks of 8), the 9 float16 one-layer LSTMs of 512 inputs
    # CUDNN_RNN_ALGO_PERSIST_STATIC's (`_fitted_persist_static`)
    import json

    from conftest import FIXTURES
    from vramscope import _rnn

    path = FIXTURES / "run" / "probes" / "lead70_rnn_long_seq_sweep_probe_h100.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    persistent = 0
    for r in rows:
        mode, dtype = _rnn.MODES[r["mode"]], getattr(torch, r["dtype"])
        b, s = r["batch"], r["seq_length"]
        args = (mode, dtype, r["input_size"], r["hidden_size"], 0, r["num_layers"], False, 0.0)
        train = _rnn._fitted(*args, True, b, s, b * s, False)
        infer = _rnn._fitted(*args, False, b, s, b * s, False)
        assert train == {
            "workspace": r["train_workspace"],
            "reserve": r["reserve"],
            "backward_workspace": r["backward_workspace"],
        }
        assert infer == {"workspace": r["infer_workspace"]}
        persistent += _rnn._persistent(mode, dtype, r["input_size"], r["hidden_size"], r["num_layers"], b)
    assert (len(rows), persistent) == (144, 9)
    # and the lj03 probe (validation/run/probes/lj70_lj03_lstm3_fp16_long_workspace_probe_h100.out):
    # its 3-layer float16 LSTM of 384 over 60 inputs at batch 64 and 256 over 128 to 1,174 steps
    out = FIXTURES.parent / "validation/run/probes/lj70_lj03_lstm3_fp16_long_workspace_probe_h100.out"
    lines = out.read_text().splitlines()
    for r in map(json.loads, lines):
        b, s = r["batch"], r["seq"]
        args = (_rnn.MODES["lstm"], torch.float16, 60, 384, 0, 3, False, 0.0)
        train = _rnn._fitted(*args, True, b, s, b * s, False)
        assert (train["workspace"], train["reserve"]) == (r["train_workspace"], r["reserve"])
        assert _rnn._fitted(*args, False, b, s, b * s, False)["workspace"] == r["infer_workspace"]
    assert len(lines) == 16


def _unidirectional_sweep_rows():
    """The unidirectional problems without projection that ran in the two H200 sweeps
    (fixtures/run/rnn_sweep_uni_h200.jsonl.xz, rnn_sweep_h200.jsonl.xz)."""
    import json
    import lzma

    from conftest import FIXTURES

    for name in ("rnn_sweep_uni_h200.jsonl.xz", "rnn_sweep_h200.jsonl.xz"):
        for line in lzma.open(FIXTURES / "run" / name, "rt"):
            r = json.loads(line)
            if r.get("set") == "meta" or r.get("error") or r["proj_size"] or r["bidirectional"]:
                continue
            yield r


def test_the_wavefront_steps_agree_with_the_sweeps_multi_layer_training():
    # every unpacked unidirectional multi-layer training problem of the two H200 sweeps
    # (rnn_sweep_uni_h200.jsonl.xz, rnn_sweep_h200.jsonl.xz) where `_wavefront_steps` gives k and the
    # twin a workspace: the training workspace and the backward's exact or under by an alignment
    # padding (at most 324 bytes; the backward differs from the training forward's only for the
    # persistent small-hidden LSTMs, `_fitted_small_h`)
    from vramscope import _rnn

    seen = exact = 0
    for r in _unidirectional_sweep_rows():
        b, s, layers = r["batch"], r["seq_length"], r["num_layers"]
        if r["lengths"] is not None or layers < 2 or _rnn._wavefront_steps(b, s, layers) is None:
            continue
        args = (r["input_size"], r["hidden_size"], 0, layers, False, r["dropout"], True, b, s, b * s)
        f = _rnn._fitted(_rnn.MODES[r["mode"]], getattr(torch, r["dtype"]), *args, False)
        if f is None or f["workspace"] is None:
            continue
        assert 0 <= r["train_workspace"] - f["workspace"] <= 324
        assert 0 <= r["backward_workspace"] - f["backward_workspace"] <= 324
        seen += 1
        exact += r["train_workspace"] == f["workspace"]
    assert (seen, exact) == (1592, 1378)


@pytest.mark.parametrize(
    ("name", "counts"),
    [
        ("rn71_rnn_wavefront_chunk_probe_h100_v2.jsonl", (5252, 12)),
        ("rn71_rnn_wavefront_chunk_probe_gaps_h100.jsonl", (720, 0)),
    ],
)
def test_the_wavefront_chunk_probes_take_the_fitted_sizes(name, counts):
    # the H100 probe validation/run/probes/rn71_rnn_wavefront_chunk_probe.py. Its second run (_v2; the
    # first, rn71_rnn_wavefront_chunk_probe_h100.jsonl, holds the same 1,307 lines byte for byte): 1,275
    # unpacked float16 GRUs of 256 over 256 inputs (batch 1 to 1,024 x 8 to 2,048 steps x 2 to 4 layers;
    # `_WAVEFRONT_CHUNKS` read from them), 16 bidirectional LSTMs and GRUs over 512 and 1,024 steps, 16
    # packed unidirectional ones to 1,024 steps and 9 unpacked ones over 3,000 and 4,096 (to
    # `_UNPACKED_LONGEST`). `gaps`: the same GRU at batch 9, 17-19, 97-104, 1,536-4,096 x 48 to 128
    # steps (121-127 among them) x 2 and 3 layers. Every figure the twin gives is the GPU's; it leaves
    # out the one-layer bidirectional GRUs (outside `_fitted`)
    import json

    from conftest import FIXTURES
    from vramscope import _rnn

    path = FIXTURES / "run" / "probes" / name
    answered = left = 0
    for r in map(json.loads, path.read_text().splitlines()):
        b, s, packed = r["batch"], r["seq_length"], r["packed"]
        tokens = r.get("tokens", b * s)
        args = (r["input_size"], r["hidden_size"], 0, r["num_layers"], r["bidirectional"], 0.0)
        mode, dtype = _rnn.MODES[r["mode"]], getattr(torch, r["dtype"])
        train = _rnn._fitted(mode, dtype, *args, True, b, s, tokens, packed) or {}
        infer = _rnn._fitted(mode, dtype, *args, False, b, s, tokens, packed) or {}
        fitted = {
            "train_workspace": train.get("workspace"),
            "reserve": train.get("reserve"),
            "backward_workspace": train.get("backward_workspace"),
            "infer_workspace": infer.get("workspace"),
        }
        for key, value in fitted.items():
            if value is None:
                left += 1
            else:
                assert value == r[key]
                answered += 1
    assert (answered, left) == counts


def test_the_packed_long_training_probe_takes_the_fitted_sizes():
    # the H100 probe validation/run/probes/rn72_rnn_packed_long_training_probe.py
    # (validation/run/probes/rn72_rnn_packed_long_training_probe_h100.jsonl): 336 packed unidirectional
    # LSTMs and GRUs, float32 and float16, 1 to 3 layers, batch 1 to 64 over 256 to 2,048 steps, equal
    # and spread lengths, hidden 256 to 1,024, inputs 128 to 1,024. Packed training is max(a, f) with
    # f = c0 + E * (B * L * pf*h + min(T, B * k)*h + T * max(h, i)): every figure exact, among them the
    # one-layer GRUs at 400 steps whose f the former form (T * (i + h)) put under a
    import json

    from conftest import FIXTURES
    from vramscope import _rnn

    path = FIXTURES.parent / "validation/run/probes/rn72_rnn_packed_long_training_probe_h100.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    above = 0
    for r in rows:
        mode, dtype = _rnn.MODES[r["mode"]], getattr(torch, r["dtype"])
        b, s, t = r["batch"], r["seq_length"], r["tokens"]
        args = (mode, dtype, r["input_size"], r["hidden_size"], 0, r["num_layers"], False, 0.0)
        train = _rnn._fitted(*args, True, b, s, t, True)
        assert train == {
            "workspace": r["train_workspace"],
            "reserve": r["reserve"],
            "backward_workspace": r["backward_workspace"],
        }
        infer = _rnn._fitted(*args, False, b, s, t, True)
        assert infer == {"workspace": r["infer_workspace"]}
        above += r["train_workspace"] > r["infer_workspace"]
    assert (len(rows), above) == (336, 178)


def test_the_packed_training_form_agrees_with_the_sweeps():
    # every packed unidirectional LSTM and GRU training problem of the two H200 sweeps
    # (rnn_sweep_uni_h200.jsonl.xz, rnn_sweep_h200.jsonl.xz; 1 to 4 layers, any h and i, with and
    # without dropout): exact or under by an alignment padding (at most 110 bytes), the wide-input
    # multi-layer ones (i + h > G*h) among them
    from vramscope import _rnn

    seen = exact = 0
    for r in _unidirectional_sweep_rows():
        if r["lengths"] is None or r["mode"] not in ("lstm", "gru"):
            continue
        args = (r["input_size"], r["hidden_size"], 0, r["num_layers"], False, r["dropout"], True)
        shape = (r["batch"], r["seq_length"], sum(r["lengths"]))
        f = _rnn._fitted(_rnn.MODES[r["mode"]], getattr(torch, r["dtype"]), *args, *shape, True)
        assert 0 <= r["train_workspace"] - f["workspace"] <= 110
        assert 0 <= r["backward_workspace"] - f["backward_workspace"] <= 110
        seen += 1
        exact += r["train_workspace"] == f["workspace"]
    assert (seen, exact) == (1267, 1042)
