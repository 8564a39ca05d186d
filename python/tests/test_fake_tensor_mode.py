"""A program's own FakeTensorMode on CUDA under the twin (PyTorch's docs size a job so: MemTracker or
FlopCounterMode over fake tensors). On the GPU the fake tensors hold no device memory; the twin keeps
them on the host, reading `cuda:0` (`_compile._program_fake_mode`), and counts only the real ones."""

from __future__ import annotations

import torch
import vramscope
from conftest import run_script
from torch import nn


def _mlp():
    return nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 10))


def _real_work(model):
    x = torch.randn(64, 256, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().sum()
    loss.backward()
    return loss.detach()


def _fake_what_if():
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode():
        with torch.device("cuda"):
            fmodel = _mlp()
        fopt = torch.optim.AdamW(fmodel.parameters(), lr=1e-3, foreach=True)
        fx = torch.randn(4096, 256, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = fmodel(fx)
        assert isinstance(out, FakeTensor) and out.device == torch.device("cuda", 0) and out.is_cuda
        assert out.dtype == torch.bfloat16  # autocast casts the fake CUDA tensors as on the GPU
        out.float().sum().backward()
        fopt.step()
        w = fmodel[0].weight
        assert w.grad.device == torch.device("cuda", 0) and w.grad.dtype == torch.float32
        assert fopt.state[w]["exp_avg"].device == torch.device("cuda", 0)
        assert fx.cpu().device.type == "cpu" and torch.ones(3).cuda().is_cuda
        # sdpa takes the GPU's fused kernel (the H100's choice for bf16), not the host's
        # `_scaled_dot_product_flash_attention_for_cpu`
        q = torch.randn(8, 6, 197, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        o = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        assert o.is_cuda and "ForCpu" not in o.grad_fn.name()


def test_a_fake_cuda_model_trained_under_the_programs_fake_tensor_mode_adds_nothing():
    # without the program's mode kept on the host the first fake `copy_` (nn.init's `uniform_`)
    # reached the CUDA device guard: "CUDA driver version is insufficient" (blind285/jz03)
    figures = []
    for fake in (False, True):
        with vramscope.capture(gpu="h100"):
            model = _mlp().cuda()
            _real_work(model)
            before = (torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
            if fake:
                _fake_what_if()
                # nothing but `init_gpu_context`'s one element, made and freed (fake_tensor.py)
                assert torch.cuda.memory_allocated() == before[0]
                assert torch.cuda.max_memory_allocated() == before[0] + 512
            torch.cuda.reset_peak_memory_stats()
            _real_work(model)
            figures.append(
                (
                    *before,
                    torch.cuda.memory_allocated(),
                    torch.cuda.max_memory_allocated(),
                    torch.cuda.memory_reserved(),
                )
            )
    assert figures[0] == figures[1]


def test_from_tensor_of_a_real_cuda_tensor_and_cuda_factories_under_the_programs_mode():
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with vramscope.capture(gpu="h100"):
        real = torch.randn(1024, 1024, device="cuda")
        held = torch.cuda.memory_allocated()
        mode = FakeTensorMode()
        f = mode.from_tensor(real)
        assert isinstance(f, FakeTensor) and f.device == torch.device("cuda", 0)
        with mode:
            g = (f @ f.T).relu()
            with torch.device("cuda"):
                h = torch.empty(4096, 4096)
            k = torch.zeros(8, 8, device=torch.device("cuda"))
            k.add_(1)
        assert g.device == h.device == k.device == torch.device("cuda", 0)
        assert g.shape == (1024, 1024) and h.is_cuda
        assert torch.cuda.memory_allocated() == held
        assert torch.cuda.max_memory_allocated() == held + 512


def test_a_mem_tracker_what_if_under_fake_tensor_mode_runs_to_the_end(tmp_script):
    script = tmp_script(
        "import torch\n"
        "from torch import nn\n"
        "from torch._subclasses.fake_tensor import FakeTensorMode\n"
        "from torch.distributed._tools.mem_tracker import MemTracker\n"
        "def model():\n"
        "    return nn.Sequential(nn.Conv2d(3, 64, 4, 4), nn.Flatten(), nn.Linear(64 * 16 * 16, 10))\n"
        "m = model().cuda()\n"
        "m(torch.randn(8, 3, 64, 64, device='cuda')).sum().backward()\n"
        "torch.cuda.reset_peak_memory_stats()\n"
        "with FakeTensorMode():\n"
        "    with torch.device('cuda'):\n"
        "        fm = model()\n"
        "    opt = torch.optim.AdamW(fm.parameters(), foreach=True)\n"
        "    mt = MemTracker()\n"
        "    mt.track_external(fm, opt)\n"
        "    with mt:\n"
        "        with torch.autocast('cuda', dtype=torch.bfloat16):\n"
        "            loss = fm(torch.randn(256, 3, 64, 64, device='cuda')).float().sum()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "    snap = mt.get_tracker_snapshot('peak')\n"
        "    est = sum(s.get('Total', 0) for d, s in snap.items() if d.type == 'cuda')\n"
        "held = torch.cuda.memory_allocated()\n"
        "print(est > 256 * 3 * 64 * 64 * 4, torch.cuda.max_memory_allocated() - held)\n"
    )
    status, lines, _, err = run_script(script)
    assert status == 0, err[-2000:]
    assert lines[-1] == "True 512"
