"""cuDNN RNNs (`vramscope._rnn`) against what an sm_90 GPU's allocator counted for the same ops
(fixtures/run/truth_h200.tar.xz, validation/run/12_lstm_train.py and 13_gru_train.py: allocations and
requested bytes of each op)."""

from __future__ import annotations

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
        xs = x.index_select(0, order)
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


def test_an_unmeasured_rnn_problem_is_named():
    with vramscope.capture() as cap:
        gru = nn.GRU(8, 16).cuda()
        gru(torch.empty(10, 3, 8, device="cuda"))
    (name,) = cap.report()["unmeasured"]
    assert name.startswith("cuDNN's training workspace and reserve of gru (input 8, hidden 16")
