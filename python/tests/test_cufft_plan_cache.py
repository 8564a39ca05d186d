"""`torch.backends.cuda.cufft_plan_cache` under the twin (blind268/ji04's probe, helper rp)."""

from __future__ import annotations

import pytest
import torch
import vramscope


def test_cufft_plan_cache_reads_counts_and_clears_as_on_the_gpu():
    # CuFFTPlanCache.h: 4,096 plans by default (CUDA >= 10), one per distinct CuFFTParams, least
    # recently used evicted past max_size; the GPU answers these, the CPU host has no CUDA device
    with vramscope.capture():
        cache = torch.backends.cuda.cufft_plan_cache
        assert cache.max_size == 4096
        assert cache.size == 0
        x = torch.randn(4, 64, 64, dtype=torch.complex64, device="cuda")
        torch.fft.fftn(x, dim=(-2, -1))
        torch.fft.ifftn(x, dim=(-2, -1))
        assert cache.size == 1  # forward and inverse share the C2C plan (direction given at exec)
        torch.fft.fftn(x[:2], dim=(-2, -1))  # another batch: another plan
        torch.fft.rfft(torch.randn(8, 100, device="cuda"))
        assert cache.size == 3
        cache.max_size = 1
        assert cache.max_size == 1
        assert cache.size == 1
        cache.clear()
        assert cache.size == 0
        assert cache[0].max_size == 1
        with pytest.raises(RuntimeError, match="device index"):
            _ = cache[3].size


def _peak_above(fn, *args):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn(*args)
    return torch.cuda.max_memory_allocated() - base, out


def test_fft_in_several_passes_holds_a_second_buffer():
    # cuda/SpectralOps.cpp: past `cufft_max_ndim` (3) dimensions `_fft_c2c_cufft` runs a second
    # pass into one more `at::empty(out_sizes)`, the first result its input, dying at the return;
    # `_fft_r2c_cufft` off `use_optimized_cufft_path` (dims starting with 0 and 1: `rfft2` of a 2-D
    # tensor) transforms the last dimension, then `working_tensor = at::empty(out_sizes)` and C2C
    # passes over the rest; `_fft_c2r_cufft` there first runs `_fft_c2c_cufft` over all but the
    # last dimension (its own output, no clone) and then the 1-D C2R transform from it
    with vramscope.capture():
        c = torch.randn(4, 8, 16, 32, dtype=torch.complex64, device="cuda")
        peak, out = _peak_above(torch.fft.fftn, c)
        assert peak == 2 * 131072  # the output and the spare
        del out
        x = torch.randn(64, 100, device="cuda")
        peak, spec = _peak_above(torch.fft.rfft2, x)
        assert spec.shape == (64, 51)
        assert peak == 2 * 26112  # the one-sided output and the working buffer
        peak, back = _peak_above(lambda s: torch.fft.irfft2(s, s=(64, 100)), spec)
        # the real output (25,600), the C2C result over dim 0 (26,112); the 1-D C2R plan of 100
        # over its (51, 64)-strided input needs no clone
        assert peak == 25600 + 26112
        assert back.shape == (64, 100)


def test_half_fft_needs_power_of_two_sizes_and_a_unit_last_stride():
    # CuFFTPlanCache.h's `CuFFTConfig`: a half-precision plan raises for a signal size that is not
    # a power of two (TimesNet/Autoformer under fp16, F5-TTS's n_fft 320: "...but got a signal
    # size of[60]"), and clones a half input whose last signal stride is not 1
    with vramscope.capture():
        x = torch.randn(8, 100, device="cuda", dtype=torch.half)
        with pytest.raises(
            RuntimeError,
            match=r"powers of two when computing in half precision, but got a signal size of\[100\]",
        ):
            torch.fft.rfft(x)
        c = torch.randn(4, 80, 80, device="cuda", dtype=torch.half)
        with pytest.raises(RuntimeError, match=r"signal size of\[80, 80\]"):
            torch.fft.rfft2(c)
        assert torch.fft.rfft(torch.randn(8, 128, device="cuda", dtype=torch.half)).dtype == torch.complex32
        # a transform along dim 0 of (128, 8): the batch collapses as a view and the signal's
        # stride is 8, so the half input is cloned (128 * 8 * 2 bytes); float32 is not
        h = torch.randn(128, 8, device="cuda", dtype=torch.half)
        peak, _ = _peak_above(lambda t: torch.fft.rfft(t, dim=0), h)
        assert peak == 2560 + 2048  # the (65, 8) complex32 output, rounded to 512, and the clone
        f = h.float()
        peak, _ = _peak_above(lambda t: torch.fft.rfft(t, dim=0), f)
        assert peak == 4608  # the (65, 8) complex64 output alone


def test_stft_with_a_host_window_raises_naming_the_gpu():
    # SpectralOps.cpp: "stft input and window must be on the same device but got self on cuda:0 and
    # window on cpu" (istft alike), a common slip (`torch.hann_window(n)` made on the host)
    with vramscope.capture():
        x = torch.randn(2, 4000, device="cuda")
        with pytest.raises(RuntimeError, match="got self on cuda:0 and window on cpu"):
            torch.stft(x, 256, window=torch.hann_window(256), return_complex=True)
        with pytest.raises(RuntimeError, match="got self on cuda:0 and window on cpu"):
            x.stft(256, window=torch.hann_window(256), return_complex=True)
        spec = torch.randn(2, 129, 20, dtype=torch.complex64, device="cuda")
        with pytest.raises(RuntimeError, match=r"istft input and window .* self on cuda:0 and window on cpu"):
            torch.istft(spec, 256, window=torch.hann_window(256))
        # a window on the GPU: no error
        assert torch.stft(x, 256, window=torch.hann_window(256, device="cuda"), return_complex=True).is_cuda


def test_bluestein_plan_takes_its_work_area_a_batch_item():
    # blind288/kc04's probe on the H100: cuFFT's 1-D complex-to-complex plan of 4,351 = 19 x 229
    # (Bluestein's) takes a work area (`at::empty({workspace_size})` in `_exec_fft`) of 139,968
    # bytes an item, 141,312 at batch 1; the plan of 4,096 none
    with vramscope.capture():
        x = torch.zeros(64, 4351, dtype=torch.complex64, device="cuda")
        peak, _ = _peak_above(torch.fft.fft, x)
        assert peak == 2227712 + 64 * 139968  # the output and the work area
        peak, _ = _peak_above(torch.fft.fft, x[:1].clone())
        assert peak == 34816 + 141312
        peak, _ = _peak_above(lambda t: torch.fft.fft(t, n=4096), x)
        assert peak == 64 * 4096 * 8


@pytest.mark.parametrize(
    ("batch", "gpu_peak"), [((16, 3), 641_728_512), ((4, 3), 160_174_592), ((1, 1), 13_348_864)]
)
def test_padded_2d_real_plans_of_1054_take_a_half_spectrum_work_area_an_item(batch, gpu_peak):
    # lk70_blind322_fft_probe's H100 events and peaks (blind322/lk04's FFT convolution): rfft2 with
    # s (1,054, 1,054) pads the input, then its output and a work area the size of the output (1,054
    # x 528 complex an item); irfft2 of the half spectrum its output, the input's clone and the same
    # work area; the unpadded 1,024 x 1,024 plan none
    with vramscope.capture():
        x = torch.zeros(*batch, 1024, 1024, device="cuda")
        peak, _ = _peak_above(lambda t: torch.fft.rfft2(t, s=(1054, 1054)), x)
        assert peak == gpu_peak
        spec = torch.zeros(*batch, 1054, 528, dtype=torch.complex64, device="cuda")
        peak, _ = _peak_above(lambda t: torch.fft.irfft2(t, s=(1054, 1054)), spec)
        assert peak == gpu_peak
        if batch == (16, 3):
            peak, _ = _peak_above(torch.fft.rfft2, x)
            assert peak == 201_719_808


def test_blind334_plans_take_the_work_areas_of_the_h100s_lw72_lines(capsys):
    # lw72_blind334_cufft_plans_probe on the H100 (its 14 cases in order, a fresh plan cache each):
    # the 1-D plans of 160,000 (blind334/lw03's Hilbert envelopes) take a work area (r2c a
    # half-spectrum an item, c2c a complex signal); lw01's float64 512/128, lw03's stft and lw05's
    # 128 x 128 plans none
    import runpy

    from conftest import ROOT

    probes = ROOT / "validation/run/probes"
    with vramscope.capture():
        runpy.run_path(str(probes / "lw72_blind334_cufft_plans_probe.py"))
    got = capsys.readouterr().out.splitlines()
    assert got == (probes / "lw72_blind334_cufft_plans_probe_h100.txt").read_text().splitlines()
