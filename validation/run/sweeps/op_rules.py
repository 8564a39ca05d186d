"""One case for each op rule blind set 8 taught the twin: the CTC loss and its backward, nearest
upsampling of a non-contiguous gradient, `isin`, cuBLAS's first `mv`/`dot` on a stream, the norm of a
transposed matrix, `irfft2`, the math attention under fp16 autocast, cuDNN attention of one query
position, RMSNorm's saved statistics. A plain script: on a GPU it prints the GPU's figures, under
`vramscope run` the twin's.

    python op_rules.py > gpu.jsonl             (on the GPU)
    vramscope run --gpu h200 --quiet op_rules.py > twin.jsonl

One JSON line per case: the allocations the call made as the memory history lists them (`sizes`,
rounded, in order), the requested bytes beyond its outputs (`extra_requested`), and the bytes still
allocated after it beyond its outputs (`kept`).
"""

import json

import torch
import torch.nn.functional as F

dev = "cuda"
aten = torch.ops.aten


def requested():
    return torch.cuda.memory_stats()["requested_bytes.all.allocated"]


def case(name, op, *args):
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    allocated, before = torch.cuda.memory_allocated(), requested()
    out = op(*args)
    after = requested()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(None)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    tensors = [t for t in outs if isinstance(t, torch.Tensor) and t.is_cuda]
    out_bytes = sum(t.untyped_storage().nbytes() for t in tensors)
    sizes = [e["size"] for e in snap["device_traces"][0] if e["action"] == "alloc"]
    kept = torch.cuda.memory_allocated() - allocated - out_bytes
    print(
        json.dumps(
            {"case": name, "sizes": sizes, "extra_requested": after - before - out_bytes, "kept": kept},
            sort_keys=True,
        ),
        flush=True,
    )
    del out, outs, tensors


def lengths(n, first, step):
    return [first + (i * step) % 7 for i in range(n)]


# ---- CTC: both paths of the backward (`is_large`), 2-D and 1-D targets -------------------------
for steps, batch, labels, longest in ((800, 32, 32, 200), (40, 4, 20, 12)):
    lp = torch.randn(steps, batch, labels, device=dev).log_softmax(-1)
    il = [steps - (i % 5) for i in range(batch)]
    tl = lengths(batch, longest - 6, 3)
    targets = torch.randint(1, labels, (batch, longest), device=dev)
    case(f"_ctc_loss {steps}x{batch}x{labels}", aten._ctc_loss, lp, targets, il, tl, 0, False)
    il_t, tl_t = torch.tensor(il, device=dev), torch.tensor(tl, device=dev)
    nll, alpha = aten._ctc_loss(lp, targets, il_t, tl_t, 0, True)
    for zero_infinity in (False, True):
        case(
            f"_ctc_loss_backward {steps}x{batch}x{labels} zero_infinity={zero_infinity}",
            aten._ctc_loss_backward,
            torch.ones(batch, device=dev),
            lp,
            targets,
            il_t,
            tl_t,
            nll,
            alpha,
            0,
            zero_infinity,
        )
    flat = torch.randint(1, labels, (sum(tl),), device=dev)
    case(f"_ctc_loss 1-D targets {steps}x{batch}x{labels}", aten._ctc_loss, lp, flat, il, tl, 0, False)
    del lp, targets, flat, nll, alpha

# ---- nearest upsampling: a gradient that is a slice of a concatenation's --------------------
for c, h in ((256, 32), (64, 16)):
    wide = torch.randn(8, c + 128, 2 * h, 2 * h, device=dev)
    grad = wide[:, :c]
    case(
        f"upsample_nearest2d_backward slice {c}x{h}",
        aten.upsample_nearest2d_backward,
        grad,
        [2 * h, 2 * h],
        [8, c, h, h],
        2.0,
        2.0,
    )
    case(
        f"upsample_nearest2d_backward contiguous {c}x{h}",
        aten.upsample_nearest2d_backward,
        wide[:, :c].contiguous(),
        [2 * h, 2 * h],
        [8, c, h, h],
        2.0,
        2.0,
    )
    case(f"upsample_nearest2d slice {c}x{h}", F.interpolate, wide[:, :c, :h, :h], None, 2.0, "nearest")
    del wide, grad

# ---- isin: the broadcast comparison's temporaries ------------------------------------------
case("isin 32000 by 1", torch.isin, torch.arange(32000, device=dev), torch.tensor([7], device=dev))
case(
    "isin 16x384 by scalar",
    torch.isin,
    torch.arange(16 * 384, device=dev).view(16, 384),
    torch.tensor(7, device=dev),
)

# ---- cuBLAS on a fresh stream: the handle's workspace comes with the first call ------------
for name, op, args in (
    ("mv", torch.mv, (torch.randn(64, 48, device=dev), torch.randn(48, device=dev))),
    ("mv strided", torch.mv, (torch.randn(64, 96, device=dev)[:, ::2], torch.randn(48, device=dev))),
    ("dot", torch.dot, (torch.randn(4096, device=dev), torch.randn(4096, device=dev))),
):
    with torch.cuda.stream(torch.cuda.Stream()):
        case(f"{name} first on a stream", op, *args)
        case(f"{name} again", op, *args)

# ---- norms: the reduction's global buffer and semaphores -----------------------------------
for shape, dt, t in (
    ((1024, 4096), torch.bfloat16, True),
    ((1024, 1024), torch.bfloat16, False),
    ((4096, 4096), torch.float32, True),
):
    x = torch.randn(shape, device=dev, dtype=dt)
    case(
        f"linalg_vector_norm {shape} {str(dt)[6:]} {'T' if t else ''}",
        torch.linalg.vector_norm,
        x.T if t else x,
    )
    del x

# ---- cuFFT complex-to-real: the input is cloned ---------------------------------------------
xf = torch.randn(16, 32, 64, 33, dtype=torch.cfloat, device=dev)
case("irfft2 16x32x64x33", lambda t: torch.fft.irfft2(t, s=(64, 64)), xf)
case("rfft2 16x32x64x64", torch.fft.rfft2, torch.randn(16, 32, 64, 64, device=dev))
del xf

# ---- the math attention under fp16 autocast: q, k, v upcast, softmax in fp32 ------------------
qkv = torch.randn(8, 3, 4, 64, 256, device=dev, dtype=torch.float16)
q, k, v = qkv.transpose(-1, -2).unbind(1)
with torch.autocast(dev, dtype=torch.float16):
    case("sdpa math under fp16 autocast", F.scaled_dot_product_attention, q, k, v)
del qkv, q, k, v

# ---- cuDNN attention: one query position against a cache ------------------------------------
for s_q in (1, 16):
    q = torch.randn(16, 16, s_q, 64, device=dev, dtype=torch.bfloat16)
    kv = torch.randn(16, 4, 385, 64, device=dev, dtype=torch.bfloat16)
    case(
        f"sdpa gqa bf16 s_q={s_q}",
        lambda a, b: F.scaled_dot_product_attention(a, b, b, enable_gqa=True),
        q,
        kv,
    )
    del q, kv

# ---- RMSNorm: the saved statistics are released with the graph's saved tensors ---------------
x = torch.randn(8, 1024, 1024, device=dev, requires_grad=True)
w = torch.ones(1024, device=dev, requires_grad=True)


def rms_step(x, w):
    y = F.rms_norm(x, (1024,), w)
    y.sum().backward()
    return y


case("rms_norm forward and backward, output kept", rms_step, x, w)

# ---- blind set 9's rules ------------------------------------------------------------------------
# the fused LSTM and GRU cells, forward and backward
for cls in (torch.nn.LSTMCell, torch.nn.GRUCell):
    cell = cls(256, 512).to(dev)
    inp = torch.randn(64, 256, device=dev, requires_grad=True)

    def cell_step(c, x):
        out = c(x)
        (out[0] if isinstance(out, tuple) else out).sum().backward()
        return out

    case(f"{cls.__name__} forward and backward", cell_step, cell, inp)
    del cell, inp

# sorts of 128 segments or more: `segmented_sort_pairs`
for shape in ((256, 8192), (2048, 6000)):
    case(
        f"sort of {shape} along -1",
        lambda t: torch.sort(t, dim=-1, descending=True),
        torch.randn(shape, device=dev),
    )

# isinf's absolute values, any's reduction scratch, nll_loss of a sliced target
half = torch.randn(8, 512, 768, device=dev, dtype=torch.float16)
case("isinf fp16 (8, 512, 768)", torch.isinf, half)
case("any bool (8, 512, 768)", lambda t: t.any(), half > 0)
del half
logits = torch.randn(64, 16000, device=dev).log_softmax(-1)
targets = torch.randint(0, 16000, (64, 49), device=dev)
case("nll_loss of a target column", F.nll_loss, logits, targets[:, 3])
