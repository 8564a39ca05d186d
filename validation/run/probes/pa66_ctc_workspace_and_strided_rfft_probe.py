"""Session 66 (helper pa): cuDNN's CTC loss workspaces and cuFFT's work area for strided inputs.

    python3 probes/pa66_ctc_workspace_and_strided_rfft_probe.py     (from validation/run; < 30 s, < 4 GB)

mx64's probe fitted cuDNN's v8 CTC workspace (tensor lengths) as 4B(TC + 2T(2*255+1) + 513) over four
problems, and the v7 one (lengths as lists, cudnnGetCTCLossWorkspaceSize) as 4B(TC + 2T(2L+1) + 3L+5)
over two problems of equal target lengths. au65's probe found the 1-D float32 rfft of 8,192 over a
transposed input taking one real signal an item of work area. One line per case: the sizes the call
allocated, in order ("allocs [...]"), from the memory history, or the error. The twin prints its own
(`vramscope run --gpu h100` of this file).
  ctc_v7_*: `torch._cudnn_ctc_loss` with list lengths (grad, workspace, costs): does the workspace
    follow the longest target (unequal lengths), and the fit at other T, C, L?
  ctc_v8_*: the tensor overload at sizes the fit has not seen.
  rfft_*: strided real FFTs at other sizes and strides (the output, then any work area).
"""

import torch

dev = "cuda"
torch.manual_seed(66)


def allocs(tag, fn):
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    try:
        out = fn()
        torch.cuda.synchronize()
        err = None
    except RuntimeError as e:
        out, err = None, e
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    sizes = [e["size"] for e in snap["device_traces"][0] if e["action"] == "alloc"]
    print(tag, "allocs", sizes if err is None else f"RAISED {str(err)[:80]}", flush=True)
    del out


def ctc(tag, T, B, C, lengths, tensors=False):
    lp = torch.randn(T, B, C, device=dev).log_softmax(2)
    targets = torch.randint(1, C, (sum(lengths),), dtype=torch.int32)
    il = [T] * B
    if tensors:
        args = (
            targets.to(dev),
            torch.tensor(il, dtype=torch.int32, device=dev),
            torch.tensor(lengths, dtype=torch.int32, device=dev),
        )
    else:
        args = (targets, il, list(lengths))
    allocs(
        f"ctc_{tag} T{T} B{B} C{C} Lmax{max(lengths)} Lsum{sum(lengths)}",
        lambda: torch._cudnn_ctc_loss(lp, *args, 0, True, False),
    )


ctc("v7_equal", 200, 64, 80, [30] * 64)
ctc("v7_equal", 200, 64, 80, [60] * 64)
ctc("v7_unequal", 200, 64, 80, [1 + (i * 59) // 63 for i in range(64)])
ctc("v7_one_long", 200, 64, 80, [60] + [10] * 63)
ctc("v7_equal", 50, 16, 30, [10] * 16)
ctc("v7_equal", 300, 8, 500, [100] * 8)
ctc("v7_equal", 64, 512, 96, [20] * 512)
ctc("v8_equal", 50, 16, 30, [10] * 16, tensors=True)
ctc("v8_equal", 300, 8, 500, [100] * 8, tensors=True)
ctc("v8_unequal", 200, 64, 80, [1 + (i * 59) // 63 for i in range(64)], tensors=True)

for n, batch in [(8192, 100), (4096, 1024), (1024, 1024), (1000, 1024), (16384, 512)]:
    x = torch.randn(n, batch, device=dev).t()  # (batch, n), strides (1, batch): as au65's
    allocs(f"rfft_transposed N{n} B{batch}", lambda x=x: torch.fft.rfft(x))
    del x
x = torch.randn(256, 2 * 8192, device=dev)[:, ::2]  # signal stride 2, batch stride 16384
allocs("rfft_every_other N8192 B256", lambda: torch.fft.rfft(x))
x = torch.randn(1024, 8192, device=dev, dtype=torch.float64).t()
allocs("rfft_transposed_double N1024 B8192", lambda: torch.fft.rfft(x))
x = torch.randn(1024, 8192, device=dev, dtype=torch.complex64).t()
allocs("fft_transposed_complex N1024 B8192", lambda: torch.fft.fft(x))
print("done")
