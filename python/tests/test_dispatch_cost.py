"""What an op costs the twin in Python: checks that `vramscope run`'s per-op work stays where
docs/run.md's "Speed" measured it (each names the work it keeps off the common path)."""

from __future__ import annotations

import os
import sys
import threading

import pytest
import torch
import vramscope
from vramscope import _capture

aten = torch.ops.aten
#: the twin's own Python files (a checkout named vramscope holds torch's too where its venv lies inside)
_PACKAGE = os.path.dirname(vramscope.__file__) + os.sep


def _called_by_the_twin() -> bool:
    """Whether the caller of the function calling this is the twin's code, not torch's."""
    return sys._getframe(2).f_code.co_filename.startswith(_PACKAGE)


def _no_walk(*args, **kwargs):
    raise AssertionError("the op's arguments were walked")


def test_a_simulated_pointwise_result_starts_no_host_loop_without_walking_its_arguments(monkeypatch):
    # `_host_parallel` runs after every op until OpenMP's workers start: a result on the simulated
    # device decides it (no host loop) before the arguments are flattened
    with vramscope.capture():
        x = torch.empty(1 << 16, device="cuda")
        y = torch.empty(1 << 16, device="cuda")
        out = x + y
        with monkeypatch.context() as m:
            m.setattr(_capture, "leaves", _no_walk)
            m.setattr(_capture, "tree_flatten", _no_walk, raising=False)
            assert _capture._host_parallel(aten.add.Tensor, (x, y), {}, out) == 0
            assert _capture._host_parallel(aten.mul_.Tensor, (x, y), {}, out) == 0
    # a host loop over more than the grain size still counts its elements
    a, b = torch.ones(40_000), torch.ones(40_000)
    assert _capture._host_parallel(aten.add.Tensor, (a, b), {}, a + b) == 40_000
    assert _capture._host_parallel(aten.add.Tensor, (a[:100], b[:100]), {}, a[:100] + b[:100]) == 0


def test_a_pointwise_op_over_stand_ins_seen_before_makes_no_host_tensor(monkeypatch):
    # `Capture.standins` runs after each op whose result carries no values (most ops of a large
    # model): once an op over the same stand-ins is known, it makes no host zero and compares
    # nothing on the host
    with vramscope.capture():
        x = torch.empty(1 << 18, device="cuda", dtype=torch.bfloat16)
        y = torch.nn.functional.silu(x) * x + 1
        made = []
        real = torch.zeros
        monkeypatch.setattr(torch, "zeros", lambda *a, **k: made.append(a) or real(*a, **k))
        y = torch.nn.functional.silu(x) * x + 1
        monkeypatch.undo()
        assert made == []
        # the stand-ins are those an op over zeros gives: silu(0) * 0 + 1 is 1
        assert _capture._tensor.standin(y).item() == 1
        del y


def test_value_rules_decline_operands_without_values_before_walking_the_arguments(monkeypatch):
    # `broadcast_values`, `dense_values` and `standin_values` run after each op whose result is
    # large: where an operand carries no values (most ops of a large model), they decline before
    # walking the op's arguments
    with vramscope.capture() as cap:
        x = torch.empty(1 << 18, device="cuda")
        y = torch.empty(1 << 18, device="cuda")
        out = x + y
        with monkeypatch.context() as m:
            m.setattr(_capture._tensor, "tensors_in", _no_walk)
            m.setattr(_capture, "_tensors", _no_walk)
            for rule in (cap.broadcast_values, cap.dense_values, cap.standin_values):
                assert rule(aten.add.Tensor, (x, y), {}, [out], [x, y]) is None


def test_the_per_thread_state_reads_what_a_thread_never_set_as_none():
    # `Capture.stream` reads the thread's own streams on every op: a name the thread never set
    # reads as the class's None (no AttributeError raised and caught)
    state = type(_capture._STATE)
    assert (state.capture, state.caller_frame, state.own_streams) == (None, None, None)
    seen = []
    t = threading.Thread(target=lambda: seen.append((_capture.current(), _capture._STATE.own_streams)))
    t.start()
    t.join()
    assert seen == [(None, None)]


def test_an_op_s_tags_are_read_once(monkeypatch):
    # `Tag in func.tags` compares pybind enums one by one (3.8 us); the twin tests an op's tags
    # after each op, so it reads them once per op
    reads = []
    real = torch._ops.OpOverload.tags

    def tags(op):
        if _called_by_the_twin():
            reads.append(op)
        return real.fget(op)

    with vramscope.capture():
        x = torch.empty(1 << 18, device="cuda")
        y = torch.nn.functional.silu(x) * 2 + x
        monkeypatch.setattr(torch._ops.OpOverload, "tags", property(tags))
        y = torch.nn.functional.silu(x) * 2 + x
        monkeypatch.undo()
        del y
    assert reads == []


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))


def test_the_facts_read_of_an_op_once_are_kept_on_it_and_read_back_without_hashing_it(monkeypatch):
    # `OpOverload.__hash__` is a Python method: each lookup of an op in a dict keyed by it called it
    # (some 35 per op dispatched in the 8B Llama step); the facts read of an op once are kept on it
    from vramscope import _philox

    ops = (aten.add.Tensor, aten.add_.Tensor, aten.mm.default, aten.linear.default, aten.cat.default)
    readers = (
        _capture._pointwise,
        _capture._seeded,
        _capture._facts,
        _capture._fresh,
        _capture._in_place,
        _capture._has_composite,
        _capture._dispatch_checks,
        _capture.no_cuda_kernel,
        _capture._run_facts,
        _capture._foreach_in_place,
        _philox.is_kernel,
    )
    first = [[read(op) for read in readers] for op in ops]
    assert first[0][:5] == [True, False, ("aten::add", True, False), True, False]
    assert first[1][3:5] == [False, True]
    assert first[3][5] and not first[2][5]

    def hashed(self):
        raise AssertionError(f"{self} hashed")

    monkeypatch.setattr(torch._ops.OpOverload, "__hash__", hashed)
    assert [[read(op) for read in readers] for op in ops] == first


def test_the_dispatch_mode_is_called_without_torch_s_dynamo_wrapper_where_dynamo_is_off(monkeypatch):
    # torch wraps a dispatch mode's `__torch_dispatch__` in `torch._disable_dynamo`, whose `_fn`
    # sets the frame callback to `_callback_from_stance(None)` around the call: nothing where no
    # callback is set in the default stance, so the twin calls its mode directly there
    wrapped = []
    real = _capture._DISPATCH_DYNAMO_OFF

    def spy(*args, **kwargs):
        wrapped.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(_capture, "_DISPATCH_DYNAMO_OFF", spy)
    with vramscope.capture():
        x = torch.ones(1024, device="cuda")
        y = x * 2
        assert torch.cuda.memory_allocated() == 8192
        assert wrapped == []
        with torch._dynamo.set_stance("force_eager"):
            z = x + y
        assert torch.ops.aten.add.Tensor in wrapped
        assert torch.cuda.memory_allocated() == 12288
        del y, z


def test_an_op_reads_the_deterministic_setting_without_torch_s_python_wrappers(monkeypatch):
    # `torch.are_deterministic_algorithms_enabled` and `is_deterministic_algorithms_warn_only_enabled`
    # are Python functions returning `torch._C`'s getters (torch/__init__.py); the twin reads the
    # setting at each op (`dispatch`'s alert, `_meta_cached`'s key): through the getters themselves
    def wrapper():
        if _called_by_the_twin():
            raise AssertionError("the op read the setting through torch's wrapper")
        return torch._C._get_deterministic_algorithms()

    with vramscope.capture():
        x = torch.ones(1024, device="cuda")
        monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", wrapper)
        monkeypatch.setattr(torch, "is_deterministic_algorithms_warn_only_enabled", wrapper)
        y = x * 2 + x.unsqueeze(0)
        monkeypatch.undo()
        assert torch.cuda.memory_allocated() == 4096 + 4096
        del y


def test_an_op_s_simulated_operands_are_found_in_order_in_nested_arguments():
    # `registered_in` walks an op's arguments once (lists, tuples and dicts, depth first): the
    # simulated tensors in the order `tensors_in` lists them, a host tensor and numbers left out
    from vramscope import _tensor

    with vramscope.capture():
        a, b, c = (torch.empty(n, device="cuda") for n in (4, 8, 16))
        host = torch.ones(2)
        tree = ((a, 1.5, [b, host, (c, {"x": a, "y": [b]})], None), {"out": c, "n": [2, host]})
        found = _tensor.registered_in(tree)
        assert [id(t) for t in found] == [id(t) for t in _tensor.tensors_in(tree) if _tensor.registered(t)]
        assert [id(t) for t in found] == [id(t) for t in (a, b, c, a, b, c)]
        assert _tensor.registered_in(a) == [a] and _tensor.registered_in(((), {})) == []


def test_a_large_op_whose_operands_carry_no_values_asks_no_value_rule(monkeypatch):
    # `run` asks `broadcast_values`, `dense_values` and `standin_values` only where some operand
    # carries values (or a result is empty, which `standin_values` computes over no values); a
    # large op of a model's forward has none: they are not called
    def declined(*args, **kwargs):
        raise AssertionError("a value rule was asked")

    with vramscope.capture():
        x = torch.empty(1 << 18, device="cuda")
        y = torch.empty(1 << 18, device="cuda")
        with monkeypatch.context() as m:
            for rule in ("broadcast_values", "dense_values", "standin_values"):
                m.setattr(_capture.Capture, rule, declined)
            out = torch.sigmoid(x) * y + x
        assert torch.cuda.memory_allocated() == 3 << 20
        # an empty result is still asked for its values (over no operand values)
        e = torch.empty(0, 1 << 18, device="cuda")
        assert (e + x).shape == (0, 1 << 18)
        del out


def test_the_large_result_checks_read_the_op_s_facts_without_hashing_it(monkeypatch):
    # `run` tests each op's results for size (`_all_small`) and for values carried at any size
    # (`_values_at_any_size`, whose uniform-draw test is kept on the op): no `OpOverload.__hash__`
    with vramscope.capture():
        x = torch.empty(1 << 18, device="cuda")
        out = x + 1
        small = torch.ones(8, device="cuda")
        assert _capture._values_at_any_size(aten.add.Tensor, [out], [x]) is False
        assert _capture._values_at_any_size(aten.rand.default, [out], []) is True

        def hashed(self):
            raise AssertionError(f"{self} hashed")

        monkeypatch.setattr(torch._ops.OpOverload, "__hash__", hashed)
        assert _capture._values_at_any_size(aten.add.Tensor, [out], [x]) is False
        assert _capture._values_at_any_size(aten.rand.default, [out], []) is True
        monkeypatch.undo()
        assert not _capture._all_small([out], [x]) and not _capture._all_small([small], [x])
        assert _capture._all_small([small, 3], [small]) and _capture._all_small([], [])
        del out


def test_the_meta_cache_key_reads_a_plain_tensor_s_device_without_the_cuda_property(monkeypatch):
    # `_meta_cached`'s key holds each tensor's device type; inside the kernels a plain simulated
    # tensor reads as meta, which the C getter says alone: the patched `Tensor.device` (its walk of
    # `_reads_cuda`) is not asked
    from vramscope import _tensor

    with vramscope.capture():
        x = torch.empty(4, 4, device="cuda")
        p = torch.nn.Parameter(torch.empty(4, device="cuda"))
        host = torch.ones(3)
        assert _tensor.device_type(x) == "cuda"  # outside the kernels: the program's view
        with _tensor.kernels():
            expected = [_capture._key((x, p, host, 2))]

            def walked(t):
                raise AssertionError("the device was read through `_reads_cuda`")

            monkeypatch.setattr(_tensor, "_reads_cuda", walked)
            assert [_capture._key((x, p, host, 2))] == expected
            monkeypatch.undo()
        assert [k[4] for k in expected[0][:3]] == ["meta", "meta", "cpu"]


def test_an_op_s_arguments_are_searched_for_a_generator_without_the_patched_class_s_check(monkeypatch):
    # the capture's `torch.Generator` answers `isinstance` in Python (`_cuda._generator`'s
    # metaclass); the function mode looks for a simulated generator among every call's arguments
    # by the C class, which every generator is an instance of
    with vramscope.capture():
        meta = type(torch.Generator)
        g = torch.Generator(device="cuda")
        x = torch.empty(4, device="cuda")
        monkeypatch.setattr(meta, "__instancecheck__", lambda cls, obj: _no_walk())
        assert _capture._simulated_generator((x, 1.5), {"generator": None}) is None
        found = _capture._simulated_generator((x,), {"generator": g})
        monkeypatch.undo()
        assert found is g and isinstance(g, torch.Generator)


def test_an_op_with_no_dispatch_mode_below_reads_no_infra_mode(monkeypatch):
    # the dispatch mode asks for a ProxyTorchDispatchMode and a FakeTensorMode below it (infra
    # modes) only where some mode is set below it: `_len_torch_dispatch_stack` counts them too
    asked = []
    real = torch._C._get_dispatch_mode

    def spy(key):
        if _called_by_the_twin():
            asked.append(key)
        return real(key)

    monkeypatch.setattr(torch._C, "_get_dispatch_mode", spy)
    with vramscope.capture():
        x = torch.ones(1024, device="cuda")
        y = x * 2 + 1
        assert asked == [] and torch.cuda.memory_allocated() == 8192
        del y


def test_an_op_outside_autocast_reads_no_device_s_autocast_setting(monkeypatch):
    # the function mode notes at each call whether the program's CUDA autocast is on
    # (`_autocast.PROGRAM_ON`): `is_autocast_enabled("cuda")` only where some device's is on
    from vramscope import _autocast

    asked = []
    real = torch.is_autocast_enabled
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda *a: asked.append(a) or real(*a))
    with vramscope.capture():
        x = torch.ones(1024, device="cuda")
        y = x * 2
        assert asked == [] and _autocast.PROGRAM_ON[0] is False
        with torch.autocast("cuda", dtype=torch.bfloat16):
            z = y + 1
            assert _autocast.PROGRAM_ON[0] is True and ("cuda",) in asked
        del y, z


def test_a_plain_op_reads_no_autograd_exclusion_and_a_dense_detach_one_layout(monkeypatch):
    # `_dispatch` asks whether autograd's keys are excluded only for an op with a composite kernel
    # (the kept fact first), and `_sparse._metadata` (every `detach`) reads a dense tensor's
    # layout once, not through each sparse layout's test
    from vramscope import _sparse

    def asked(*args, **kwargs):
        raise AssertionError("asked")

    with vramscope.capture():
        x = torch.ones(1024, device="cuda", requires_grad=True)
        with monkeypatch.context() as m:
            m.setattr(_capture, "_below_autograd", asked)
            for test in ("_sparse", "_csr", "_bsr"):
                m.setattr(_sparse, test, asked)
            y = (x * 2).detach()
        assert torch.cuda.memory_allocated() == 8192
        del y


def test_a_plain_tensor_s_meta_flag_and_registration_are_read_without_disabling_torch_functions(
    monkeypatch,
):
    # `BASE_IS_META` and `registered` (several calls an op) read `TensorBase`'s C getters under
    # `DisableTorchFunction`; for a plain tensor or a parameter with no torch-function mode set
    # they answer the same without it. A program's mode, or a subclass, still goes through it
    from torch.overrides import TorchFunctionMode
    from vramscope import _tensor

    entered = []
    real = _tensor._NO_TF

    def counting():
        entered.append(1)
        return real()

    with vramscope.capture() as cap:
        x = torch.empty(4, device="cuda")
        p = torch.nn.Parameter(torch.empty(4, device="cuda"))
        host = torch.ones(2)
        # as in an op's kernels: the capture's function mode off the stack
        with _tensor.kernels(), _capture._without_function_mode(cap._modes[0]):
            monkeypatch.setattr(_tensor, "_NO_TF", counting)
            got = [_tensor.BASE_IS_META(t) for t in (x, p, host)] + [
                _tensor.registered(t) for t in (x, p, host)
            ]
            assert entered == []
            with TorchFunctionMode():
                again = [_tensor.BASE_IS_META(t) for t in (x, p, host)]
                again += [_tensor.registered(t) for t in (x, p, host)]
            monkeypatch.undo()
        assert got == again == [True, True, False, True, True, False] and len(entered) == 6
