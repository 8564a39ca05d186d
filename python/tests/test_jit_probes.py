"""Session 62's TorchScript probes as the H100 ran them (fixtures/run/probes/tv62_*_h100.txt), run
under the twin line for line."""

import runpy
import warnings

import torch
import vramscope
from conftest import FIXTURES, ROOT

PROBES = ROOT / "validation" / "run" / "probes"


def _run(probe, capsys):
    with vramscope.capture(gpu="h100") as cap, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runpy.run_path(str(PROBES / probe), run_name="__main__")
    return capsys.readouterr().out.splitlines(), cap


def test_trace_freeze_and_optimize_for_inference_as_the_h100_ran_them(capsys):
    # tv62_jit_trace_freeze_probe_s62 (ResNet-50, 16 x 224, eval): torch.jit.trace, freeze and
    # optimize_for_inference, 3 calls each. optimize_for_inference's CUDA pass fuses each frozen
    # conv + relu into cudnn_convolution_relu and conv + add_ + relu into cudnn_convolution_add_relu
    # (torch/csrc/jit/passes/frozen_conv_add_relu_fusion_cuda.cpp), its filter asking for CUDA
    # constants, which the twin's are not in C++ (meta): unfused, the twin peaked 18.7 MB higher
    # (502,733,312 against 483,990,528). The fused node takes the relu's place, after the
    # downsample convolution: the block's conv3 output is no longer live at that conv's workspace
    gpu = (FIXTURES / "run" / "probes" / "tv62_jit_trace_freeze_probe_s62_h100.txt").read_text()
    twin, _ = _run("tv62_jit_trace_freeze_probe_s62.py", capsys)
    assert twin == gpu.splitlines()


def test_optimize_for_inference_fuses_as_the_cuda_pass_does():
    # the graph the CUDA pass leaves: conv + relu and conv + add + relu fused, a conv alone kept
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.b = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.c = torch.nn.Conv2d(8, 8, 1)

        def forward(self, x):
            y = torch.relu(self.a(x))
            return torch.relu(self.b(y) + self.c(x))

    with vramscope.capture(gpu="h100"), torch.no_grad():
        m = torch.jit.optimize_for_inference(torch.jit.script(Block().cuda().eval()))
        kinds = [n.kind() for n in m.graph.nodes() if n.kind().startswith("aten::")]
        x = torch.randn(2, 8, 16, 16, device="cuda")
        assert m(x).shape == (2, 8, 16, 16)
    assert kinds == ["aten::cudnn_convolution_relu", "aten::conv2d", "aten::cudnn_convolution_add_relu"]


def test_optimize_for_inference_keeps_a_conv_on_host_weights_unfused():
    # the pass's filter: the weight a CUDA constant; a CPU module's convs stay as they are
    with vramscope.capture(gpu="h100"), torch.no_grad():
        seq = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
        m = torch.jit.optimize_for_inference(torch.jit.script(seq))
        kinds = {n.kind() for n in m.graph.nodes()}
    assert "aten::cudnn_convolution_relu" not in kinds


def test_script_trace_and_eager_training_as_the_h100_ran_them(capsys):
    # tv62_jit_script_train_probe_s62 (timm ResNet-18, 16 x 224, SGD): every line agreed at 1f7e6100
    gpu = (FIXTURES / "run" / "probes" / "tv62_jit_script_train_probe_s62_h100.txt").read_text()
    twin, _ = _run("tv62_jit_script_train_probe_s62.py", capsys)
    assert twin == gpu.splitlines()


def test_optimize_for_inference_holds_out_a_conv_its_filter_refuses():
    # the filter asks for a contiguous weight: a channels-last one keeps its conv and relu apart,
    # the next conv + relu fuse
    with vramscope.capture(gpu="h100"), torch.no_grad():
        seq = torch.nn.Sequential(
            torch.nn.Conv2d(8, 8, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, padding=1),
            torch.nn.ReLU(),
        )
        seq = seq.cuda().eval()
        seq[0].weight.data = seq[0].weight.data.contiguous(memory_format=torch.channels_last)
        m = torch.jit.optimize_for_inference(torch.jit.script(seq))
        kinds = [n.kind() for n in m.graph.nodes() if n.kind().startswith("aten::")]
        assert m(torch.randn(2, 8, 16, 16, device="cuda")).shape == (2, 8, 16, 16)
    assert kinds == ["aten::conv2d", "aten::relu", "aten::cudnn_convolution_relu"]


FUSED = "cuDNN's fused conv-add-relu plan's workspace"


def test_fused_conv_workspaces_as_the_h100_ran_them(capsys):
    # ji62_fused_conv_workspace_probe (ResNet-50's 23 convolutions, 16 x 224, fp32): plain,
    # cudnn_convolution_relu and cudnn_convolution_add_relu, two calls each. The fused plans'
    # workspaces differ from the plain ones on 9 problems (all 1x1, stride 1: (16,64,56,56) x
    # (256,64,1,1) 13,959,680 against 1,048,576); the twin took the plain ones until session 62
    gpu = (FIXTURES / "run" / "probes" / "ji62_fused_conv_workspace_probe_h100.txt").read_text()
    twin, cap = _run("ji62_fused_conv_workspace_probe.py", capsys)
    assert twin == gpu.splitlines()
    assert FUSED not in cap.unmeasured


def test_an_unmeasured_fused_conv_takes_the_plain_workspace_and_says_so():
    aten = torch.ops.aten

    def above(op, args):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        y = op(*args)
        return torch.cuda.max_memory_allocated() - before - y.untyped_storage().nbytes()

    with vramscope.capture(gpu="h100") as cap, torch.no_grad():
        x = torch.randn(8, 64, 40, 40, device="cuda")
        w = torch.randn(64, 64, 3, 3, device="cuda")
        b = torch.randn(64, device="cuda")
        plain = above(aten.convolution, (x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1))
        fused = above(aten.cudnn_convolution_relu, (x, w, b, [1, 1], [1, 1], [1, 1], 1))
    assert plain > 0
    assert fused == plain
    assert cap.unmeasured.get(FUSED) == 1


def test_conv_workspaces_without_tf32_as_the_h100_ran_them(capsys):
    # m80_conv_tf32_off_probe_s64 (blind280/ju04's ResNet-18 problems at batch 128 and 8, fp32):
    # with `torch.backends.cudnn.allow_tf32 = False` cuDNN drops its tensor-core engines
    # (cudnn/Conv_v8.cpp `filterEngineConfigs`) and its plans take other workspaces (0 for 19 of the
    # 22 problems, 285,802,496 bytes where TF32's take 103,350,419 for (128,128,28,28) x 3x3); the
    # twin took TF32's for both until session 66. The fused ops take the plain convolution's.
    gpu = (FIXTURES / "run" / "probes" / "m80_conv_tf32_off_probe_s64_h100.txt").read_text()
    flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        twin, _ = _run("m80_conv_tf32_off_probe_s64.py", capsys)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags
    assert twin == gpu.splitlines()


def test_an_unmeasured_conv_without_tf32_takes_the_tf32_workspace_and_says_so():
    with vramscope.capture(gpu="h100") as cap, torch.no_grad():
        x = torch.randn(8, 64, 40, 40, device="cuda")
        w = torch.randn(64, 64, 3, 3, device="cuda")
        torch.nn.functional.conv2d(x, w, padding=1)
        assert not cap.unmeasured.get("cuDNN's float32 forward workspace with allow_tf32 False")
        torch.backends.cudnn.allow_tf32 = False
        try:
            torch.nn.functional.conv2d(x, w, padding=1)
        finally:
            torch.backends.cudnn.allow_tf32 = True
    assert cap.unmeasured.get("cuDNN's float32 forward workspace with allow_tf32 False") == 1


def test_conv_workspaces_under_cudnn_deterministic_as_the_h100_ran_them(capsys):
    # lx73_conv_deterministic_workspace_probe (blind335/lx01's ResNet-18 problems at batch 256, fp32):
    # with `torch.backends.cudnn.deterministic = True` cudnn/Conv_v8.cpp's filterEngineConfigs drops
    # the nondeterministic engines; the stem's data gradient then takes 1,042,416,128 bytes and the
    # first 1x1 downsample's weight gradient 512 where the tables' plans take none
    gpu = (PROBES / "lx73_conv_deterministic_workspace_probe_h100.out").read_text()
    try:
        twin, cap = _run("lx73_conv_deterministic_workspace_probe.py", capsys)
    finally:
        torch.backends.cudnn.deterministic = False
    assert twin == gpu.splitlines()
    assert not any("deterministic" in k for k in cap.unmeasured)


def test_a_conv_under_cudnn_deterministic_takes_the_tables_workspace_and_says_so():
    # cudnn/Conv_v8.cpp's filterEngineConfigs drops the nondeterministic engines then: no measured
    # workspace holds (blind335/lx01, pytorch/examples imagenet with --seed)
    what = "cuDNN's {} workspace under deterministic algorithms"
    with vramscope.capture(gpu="h100") as cap:
        x = torch.randn(8, 64, 40, 40, device="cuda", requires_grad=True)
        w = torch.randn(64, 64, 3, 3, device="cuda", requires_grad=True)
        torch.nn.functional.conv2d(x, w, padding=1).sum().backward()
        assert not any(cap.unmeasured.get(what.format(op)) for op in ("forward", "dgrad", "wgrad"))
        torch.backends.cudnn.deterministic = True
        try:
            torch.nn.functional.conv2d(x, w, padding=1).sum().backward()
        finally:
            torch.backends.cudnn.deterministic = False
    assert [cap.unmeasured.get(what.format(op)) for op in ("forward", "dgrad", "wgrad")] == [1, 1, 1]
