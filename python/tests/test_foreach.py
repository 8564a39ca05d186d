"""Foreach reductions and embedding as an sm_90 GPU's allocator counted them (ops truth of
validation/run/blind2/b05, fixtures/run/truth_blind2_h200.tar.xz)."""

from __future__ import annotations

import pytest
import torch
import vramscope


def test_clip_grad_norm_takes_foreach_norm_with_its_chunk_scratch():
    with vramscope.capture():
        ps = [torch.nn.Parameter(torch.empty(32768, 768, device="cuda"))]
        ps += [torch.nn.Parameter(torch.empty(768, device="cuda")) for _ in range(74)]
        for p in ps:
            p.grad = torch.empty_like(p)
        before = torch.cuda.memory_stats()
        norms = torch._foreach_norm([p.grad for p in ps], 2)
        after = torch.cuda.memory_stats()
        # 75 results, then output_per_tensor: 75 tensors x 384 chunks x 4 bytes
        assert after["allocation.all.allocated"] - before["allocation.all.allocated"] == 76
        assert after["requested_bytes.all.allocated"] - before["requested_bytes.all.allocated"] == 115500
        assert len(norms) == 75
        seen = []
        orig = torch._foreach_norm

        def spy(*a, **k):
            seen.append(1)
            return orig(*a, **k)

        torch._foreach_norm = spy
        try:
            torch.nn.utils.clip_grad_norm_(ps, 1.0)
        finally:
            torch._foreach_norm = orig
        assert seen, "clip_grad_norm_ took the per-tensor path"


def test_embedding_copies_indices_it_cannot_flatten():
    with vramscope.capture():
        w = torch.empty(32768, 768, device="cuda")
        ids = torch.zeros(8, 1025, dtype=torch.long, device="cuda")[:, :-1]
        before = torch.cuda.memory_stats()
        torch.nn.functional.embedding(ids, w)
        after = torch.cuda.memory_stats()
        assert (
            after["requested_bytes.all.allocated"] - before["requested_bytes.all.allocated"]
            == 25165824 + 65536
        )


def test_clip_grad_value_runs_on_simulated_tensors():
    with vramscope.capture():
        p = torch.nn.Parameter(torch.empty(1000, device="cuda"))
        p.grad = torch.empty_like(p)
        torch.nn.utils.clip_grad_value_([p], clip_value=0.5)


def test_an_in_place_foreach_op_still_checks_each_distinct_operand():
    # `_foreach_checked` runs the meta kernel over one position per distinct operands' metadata:
    # the one odd position is still checked, and unequal lists still say how long they are
    with vramscope.capture():
        a = [torch.empty(4, 4, device="cuda") for _ in range(5)]
        b = [torch.empty(4, 4, device="cuda") for _ in range(4)] + [torch.empty(3, 4, device="cuda")]
        torch._foreach_lerp_(a, a, 0.5)
        torch._foreach_addcdiv_(a, a, a, [0.1] * 5)
        with pytest.raises(RuntimeError, match="broadcast a dimension of length 3"):
            torch._foreach_lerp_(a, b, 0.5)
        with pytest.raises(RuntimeError, match="same number of tensors, got 5 and 4"):
            torch._foreach_lerp_(a, b[:4], 0.5)
        # ten tensors of 64 bytes (512 each, rounded): the in-place ops allocated nothing
        assert torch.cuda.memory_allocated() == 10 * 512


def test_fused_sgd_allocates_only_its_momentum_buffers():
    # `_fused_sgd_` has no meta kernel; FusedSgdKernel.cu passes its lists' metadata as kernel
    # arguments (`multi_tensor_apply_for_fused_optimizer`): the first step allocates the momentum
    # buffers (`torch.empty_like(grad)` in sgd.py's `_fused_sgd`), later steps nothing
    with vramscope.capture():
        ps = [torch.nn.Parameter(torch.zeros(1000, device="cuda")) for _ in range(3)]
        for p in ps:
            p.grad = torch.ones_like(p)
        opt = torch.optim.SGD(ps, lr=0.1, momentum=0.9, fused=True)
        steps = []
        for _ in range(2):
            before = torch.cuda.memory_stats()
            opt.step()
            after = torch.cuda.memory_stats()
            steps.append(after["allocation.all.allocated"] - before["allocation.all.allocated"])
        assert steps == [3, 0]
        assert all(opt.state[p]["momentum_buffer"].shape == (1000,) for p in ps)


def test_grouping_by_device_keys_simulated_tensors_by_their_cuda_device():
    # ForeachUtils.h keys each group by its tensors' device: cuda:0 on a GPU, where callers move
    # tensors to the key (swa_utils' AveragedModel.update_parameters: `self.n_averaged.to(device)`,
    # a host tensor copied per group; blind173/fq05's H200 history, 8 bytes each)
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    with vramscope.capture():
        net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)).cuda()
        groups = torch.utils._foreach_utils._group_tensors_by_device_and_dtype(
            [[p for p in net.parameters()]]
        )
        assert [device for device, _ in groups] == [torch.device("cuda", 0)]
        ema = AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(0.999), use_buffers=True)
        ema.update_parameters(net)
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        ema.update_parameters(net)
        # two groups (float32, and int64's num_batches_tracked): two copies of n_averaged, then
        # the int64 group's three float temporaries of `p_ema * decay + p_model * (1 - decay)`
        assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == 5
