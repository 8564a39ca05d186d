"""GPU probe: zero-sized convolutions, eager and compiled (session 60, helper ms; not run yet).

Run: python validation/run/probes/ms60_conv_zero.py   (the twin: vramscope run --gpu h200 ...)

Each line: the case, then `ok SHAPE peak+P kept+K` (bytes over memory_allocated at the start) or
`raises TYPE: first line`. Expected on the GPU (PyTorch 2.11's aten/src/ATen/native/Convolution.cpp,
cudnn/Conv_v8.cpp, torch/_meta_registrations.py, torch/_subclasses/fake_impls.py):
- a zero batch (or zero input channels): `_select_conv_backend` -> `ConvBackend::Empty`, no cuDNN:
  forward `input * weight_view[0]` (no bytes); backward `zeros_like(input)`, `zeros_like(weight)`,
  `zeros(bias_sizes)`. fwd+bwd peak = sum 512 + its seed 512 + weight-sized grad + 512 (bias):
    eager conv2d empty batch fwd: ok (0, 128, 32, 32) peak+0 kept+0
    eager conv2d empty batch fwd+bwd: ok (0, 128, 32, 32) peak+296448 kept+295424
    eager conv1d empty batch fwd+bwd: ok (0, 32, 96) peak+11776 kept+10752
    eager conv2d zero in-channels: ok (4, 0, 30, 30) peak+0 kept+0
- a transposed convolution whose padding leaves no output: cuDNN's transpose, which returns at
  `grad_input.numel() == 0` (the forward is cuDNN's data gradient); the meta kernel allows it on
  CUDA (`calc_conv_nd_return_shape`: `is_cudnn`):
    eager conv_transpose2d output H=0 fwd: ok (1, 64, 0, 199) peak+0 kept+0
    eager conv_transpose1d L_out=0: ok (1, 8, 0) peak+0 kept+0
    eager conv_transpose2d H_out=W_out=0: ok (1, 8, 0, 0) peak+0 kept+0
- an empty input of nonzero batch and channels: `_select_conv_backend` raises (eager, and dynamo's
  fake call, fake_impls.conv):
    eager conv_transpose2d of a zero-H input: raises RuntimeError: Only zero batch or zero channel
      inputs are supported, but got input shape: [1, 64, 0, 199]   (one line)
    compiled ...: raises TorchRuntimeError: RuntimeError when making fake tensor call
- NOT SETTLED BY THE SOURCE (the twin prints `ok`): the backward of a transposed convolution with
  no output runs cuDNN on an empty gradient for a non-empty input gradient and weight gradient
  (`raw_cudnn_convolution_forward_out` / `_backward_weight_out` return only at their *output's*
  `numel() == 0`): `conv_transpose2d output H=0 fwd+bwd` may raise a cuDNN error on the GPU.
- compiled: the same figures, but a compiled conv2d over an empty batch keeps Inductor's
  channels-last copy of the weight (layout optimization; saved for backward):
    compiled conv2d empty batch fwd: ok (0, 128, 32, 32) peak+294912 kept+294912
  and its backward is PREDICTED to raise: the fake kernel gives the weight's gradient the Empty
  backend's contiguous format (`_conv_determine_backend_memory_format`), the kernel `zeros_like`
  of the channels-last weight, so the wrapper's `assert_size_stride` fails:
    compiled conv2d empty batch fwd+bwd: raises AssertionError: expected size 64==64, stride 1==9
      at dim=1; ...   (one line)
  (1-D convolutions, no layout optimization: `compiled conv1d empty batch fwd+bwd` as eager; the
  compiled zero-channel and zero-output lines show peak+512, the trace's fake CUDA tensor,
  `init_gpu_context`.)"""

import torch

torch._dynamo.config.recompile_limit = 64  # (each case compiles its own graph)


def probe(label, f):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    try:
        out = f()
        torch.cuda.synchronize()
        peak, kept = torch.cuda.max_memory_allocated() - base, torch.cuda.memory_allocated() - base
        print(f"{label}: ok {tuple(out.shape)} peak+{peak} kept+{kept}", flush=True)
    except Exception as e:
        print(f"{label}: raises {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)


def fwd_bwd(m, x):
    def f():
        y = m(x)
        y.sum().backward()
        return y

    return f


conv = torch.nn.Conv2d(64, 128, 3, padding=1).cuda()
conv1 = torch.nn.Conv1d(16, 32, 5).cuda()
convt = torch.nn.ConvTranspose2d(39, 64, (1, 11), stride=(2, 1), padding=(1, 0), output_padding=(1, 0)).cuda()
ct1 = torch.nn.ConvTranspose1d(4, 8, 1, padding=1).cuda()
ct2 = torch.nn.ConvTranspose2d(4, 8, 1, padding=1).cuda()
ct3 = torch.nn.ConvTranspose2d(64, 64, (1, 9), stride=(8, 1)).cuda()
x0 = torch.randn(0, 64, 32, 32, device="cuda", requires_grad=True)
x1 = torch.randn(0, 16, 100, device="cuda", requires_grad=True)
xc0 = torch.randn(4, 0, 32, 32, device="cuda")
wc0 = torch.randn(8, 0, 3, 3, device="cuda")
xt = torch.randn(1, 39, 1, 189, device="cuda", requires_grad=True)
a = torch.randn(1, 4, 2, device="cuda")
b = torch.randn(1, 4, 2, 2, device="cuda")
c = torch.randn(1, 64, 0, 199, device="cuda")
for compiled in (False, True):
    tag = "compiled " if compiled else "eager "

    def C(m, compiled=compiled):
        return torch.compile(m) if compiled else m

    probe(tag + "conv2d empty batch fwd", lambda: C(conv)(x0.detach()))
    probe(tag + "conv2d empty batch fwd+bwd", fwd_bwd(C(conv), x0))
    probe(tag + "conv1d empty batch fwd+bwd", fwd_bwd(C(conv1), x1))
    probe(tag + "conv2d zero in-channels", lambda: C(torch.nn.functional.conv2d)(xc0, wc0))
    probe(tag + "conv_transpose2d output H=0 fwd", lambda: C(convt)(xt.detach()))
    probe(tag + "conv_transpose2d output H=0 fwd+bwd", fwd_bwd(C(convt), xt))
    with torch.no_grad():
        probe(tag + "conv_transpose1d L_out=0", lambda: C(ct1)(a))
        probe(tag + "conv_transpose2d H_out=W_out=0", lambda: C(ct2)(b))
        probe(tag + "conv_transpose2d of a zero-H input", lambda: C(ct3)(c))
    for m in (conv, conv1, convt):
        m.zero_grad(set_to_none=True)
    x0.grad = x1.grad = xt.grad = None
