"""The tests' process state: a compile error leaves dynamo's frame-evaluation shim installed
(PyTorch 2.11), which changes when a temporary argument dies; conftest's autouse fixture takes
it out after each test, so a test's frees do not depend on the tests before it."""

import torch
from conftest import calls_inline, restore_default_frame_evaluation


def test_a_compile_error_leaves_the_shim_and_the_fixture_takes_it_out():
    @torch.compile(fullgraph=True, backend="eager")
    def f(x):
        print("a graph break")
        return x + 1

    assert calls_inline()
    try:
        f(torch.ones(2))
    except torch._dynamo.exc.Unsupported:
        pass
    # PyTorch's leak: the calls of this process no longer run inline
    assert not calls_inline()
    restore_default_frame_evaluation()
    assert calls_inline()
    assert torch._C._dynamo.eval_frame.get_eval_frame_callback() is None

    # dynamo still compiles afterwards, and leaves no shim behind
    g = torch.compile(lambda x: x * 2, backend="eager")
    assert g(torch.ones(2)).tolist() == [2.0, 2.0]
    assert calls_inline()
