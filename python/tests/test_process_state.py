"""State one test could leave for the next in the process: a compile error leaves dynamo's
frame-evaluation shim installed (PyTorch 2.11), which changes when a temporary argument dies
(conftest's autouse fixture takes it out after each test); a capture must leave torch's config
options as they were."""

import torch
import vramscope
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


def test_a_capture_leaves_torchs_config_options_as_they_were():
    # the capture's patch of `torch._dynamo.config.fake_tensor_cache_enabled` (and functorch's
    # `enable_autograd_cache`) was undone with `delattr`, which hides a config module's option:
    # after any capture, torch.compile in the process raised "... does not exist"
    import torch._functorch.config as functorch_config

    options = (
        (torch._dynamo.config, "fake_tensor_cache_enabled"),
        (functorch_config, "enable_autograd_cache"),
    )
    before = [getattr(m, n) for m, n in options]
    with vramscope.capture():
        torch.ones(2, device="cuda")
    assert [getattr(m, n) for m, n in options] == before
    f = torch.compile(lambda x: x * 2, backend="eager")
    assert f(torch.ones(2)).tolist() == [2.0, 2.0]
