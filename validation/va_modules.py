"""Which kernel modules an op loads, and the host memory libcuda requests for each (the driver's
address-space rule 12, docs/driver-placement.md), on a GPU under validation/malloc_log.c:

    gcc -O2 -shared -fPIC -o /tmp/ml.so validation/malloc_log.c -ldl
    MALLOC_LOG=OUT/one_NAME.mlog LD_PRELOAD=/tmp/ml.so python3 validation/va_modules.py one NAME

runs `fill_` (a primer), then a mark, then op NAME alone, in a fresh process; `all` runs every op
in one process with a mark before each. Offline, the requests of 1 MiB or more after the mark:

    python3 validation/va_modules.py table fixtures/va_maps/modules_h200.tar.xz

(the archive keeps each log's marks and libcuda's requests). Ops that load the same requests share
a module; `_MODULE_OPS` in python/vramscope/_capture.py and `MODULE_HOST_MALLOCS` in
crates/engine/src/runtime.rs hold the table.
"""

import sys

if __name__ == "__main__" and sys.argv[1:2] == ["table"]:
    import os
    import tarfile

    with tarfile.open(sys.argv[2]) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            if not m.name.endswith(".mlog"):
                continue
            on, req = False, []
            for line in tar.extractfile(m).read().decode().splitlines():
                f = line.split()
                if f and f[0] == "#":
                    on = f[1] == "op"
                elif on and f and f[0] == "m" and f[-1].startswith("libcuda") and int(f[1]) >= 1 << 20:
                    req.append(f[1])
            print(f"{os.path.basename(m.name)[:-5]:22} {' + '.join(req) or '-'}")
    sys.exit(0)

import ctypes
import os

import torch
import torch.nn.functional as F

try:
    mark = ctypes.CDLL(None).vramscope_mark
    mark.argtypes = [ctypes.c_char_p]
except AttributeError:  # a dry run without the logger

    def mark(label):
        return None


torch.manual_seed(0)
dev = os.environ.get("DEV", "cuda")


def g(t):
    return t.to(dev)  # contiguous host-to-device copy: a memcpy, no kernel


aten = torch.ops.aten
x = g(torch.randn(512, 512))
y = g(torch.randn(512, 512))
xb = g(torch.randn(512, 512).bfloat16())
xh = g(torch.randn(512, 512).half())
m = g(torch.rand(512, 512) > 0.5)
idx = g(torch.randint(0, 512, (512,)))
idx2 = g(torch.randint(0, 512, (512, 4)))
tgt = g(torch.randint(0, 512, (512,)))
x4 = g(torch.randn(4, 16, 32, 32))
w4 = g(torch.randn(16, 16, 3, 3))
q = g(torch.randn(2, 8, 128, 64).bfloat16())
ln_w = g(torch.ones(512))
ln_b = g(torch.zeros(512))
v512 = g(torch.randn(512))
seq = g(torch.randint(0, 16, (512, 4)))
lst = [g(torch.randn(512)) for _ in range(4)]
lst2 = [g(torch.randn(512)) for _ in range(4)]
lst3 = [g(torch.randn(512)) for _ in range(4)]
steps = [g(torch.zeros(())) for _ in range(4)]
OPS = {
    "exp": lambda: x.exp(),
    "log": lambda: x.abs().log(),
    "sqrt": lambda: x.sqrt(),
    "rsqrt": lambda: x.rsqrt(),
    "sin": lambda: x.sin(),
    "cos": lambda: x.cos(),
    "tanh": lambda: x.tanh(),
    "sigmoid": lambda: x.sigmoid(),
    "neg": lambda: x.neg(),
    "abs": lambda: x.abs(),
    "reciprocal": lambda: x.reciprocal(),
    "erf": lambda: x.erf(),
    "add": lambda: x + y,
    "sub": lambda: x - y,
    "mul": lambda: x * y,
    "div": lambda: x / y,
    "maximum": lambda: torch.maximum(x, y),
    "minimum": lambda: torch.minimum(x, y),
    "pow": lambda: x.pow(2),
    "eq_s": lambda: x == 0,
    "eq_t": lambda: x == y,
    "ne": lambda: x != 0,
    "lt": lambda: x < 0,
    "gt": lambda: x > 0,
    "le": lambda: x <= 0,
    "ge": lambda: x >= 0,
    "bool_and": lambda: m & m,
    "logical_not": lambda: ~m,
    "where": lambda: torch.where(m, x, y),
    "masked_fill": lambda: x.masked_fill(m, 0.0),
    "masked_fill_i64": lambda: idx2.masked_fill(idx2 == 0, -100),
    "clamp": lambda: x.clamp(0, 1),
    "relu": lambda: x.relu(),
    "gelu": lambda: F.gelu(x),
    "gelu_tanh": lambda: F.gelu(x, approximate="tanh"),
    "silu": lambda: F.silu(x),
    "softplus": lambda: F.softplus(x),
    "leaky_relu": lambda: F.leaky_relu(x),
    "hardswish": lambda: F.hardswish(x),
    "elu": lambda: F.elu(x),
    "sum": lambda: x.sum(),
    "sum_dim": lambda: x.sum(1),
    "mean": lambda: x.mean(1),
    "amax": lambda: x.amax(1),
    "max_dim": lambda: x.max(1),
    "argmax": lambda: x.argmax(1),
    "min": lambda: x.min(),
    "norm": lambda: x.norm(),
    "var": lambda: x.var(1),
    "cumsum": lambda: x.cumsum(1),
    "prod": lambda: x.prod(1),
    "logsumexp": lambda: x.logsumexp(1),
    "any": lambda: m.any(),
    "all": lambda: m.all(),
    "softmax": lambda: x.softmax(1),
    "log_softmax": lambda: x.log_softmax(1),
    "softmax_f32_of_bf16": lambda: xb.softmax(1, dtype=torch.float32),
    "softmax_bw": lambda: aten._softmax_backward_data(x, y, 1, torch.float32),
    "log_softmax_bw": lambda: aten._log_softmax_backward_data(x, y, 1, torch.float32),
    "index_select": lambda: x.index_select(0, idx),
    "gather": lambda: x.gather(1, idx2),
    "scatter": lambda: x.scatter(1, idx2, 1.0),
    "scatter_add": lambda: x.scatter_add(1, idx2, x[:, :4].contiguous()),
    "index_add": lambda: x.index_add(0, idx, y),
    "index": lambda: x[idx],
    "index_put": lambda: x.index_put_((idx,), y, accumulate=True),
    "nonzero": lambda: m.nonzero(),
    "masked_select": lambda: x.masked_select(m),
    "embedding": lambda: F.embedding(idx, x),
    "embedding_bw": lambda: aten.embedding_dense_backward(y, idx, 512, -1, False),
    "topk": lambda: x.topk(4, 1),
    "sort": lambda: x.sort(1),
    "unique": lambda: idx.unique(),
    "fill": lambda: torch.zeros(512, 512, device=dev),
    "to_bf16": lambda: x.to(torch.bfloat16),
    "to_f32": lambda: xb.float(),
    "to_half": lambda: x.half(),
    "copy_nc": lambda: x.t().contiguous(),
    "cat": lambda: torch.cat([x, y]),
    "stack": lambda: torch.stack([x, y]),
    "arange": lambda: torch.arange(1000, device=dev),
    "randint": lambda: torch.randint(0, 10, (512,), device=dev),
    "randn": lambda: torch.randn(512, device=dev),
    "rand": lambda: torch.rand(512, device=dev),
    "dropout": lambda: F.dropout(x, 0.1, True),
    "multinomial": lambda: torch.multinomial(x.softmax(1), 1),
    "layer_norm": lambda: F.layer_norm(x, (512,), ln_w, ln_b),
    "group_norm": lambda: F.group_norm(x4, 4),
    "batch_norm": lambda: F.batch_norm(x4, None, None, training=True),
    "rms_norm": lambda: F.rms_norm(x, (512,), ln_w),
    "ln_bw": lambda: aten.native_layer_norm_backward(
        y, x, [512], x.mean(1, keepdim=True), x.std(1, keepdim=True), ln_w, ln_b, [True, True, True]
    ),
    "cross_entropy": lambda: F.cross_entropy(x, tgt),
    "nll_bw": lambda: aten.nll_loss_backward(
        g(torch.tensor(1.0)), x, tgt, None, 1, -100, g(torch.tensor(512.0))
    ),
    "mse": lambda: F.mse_loss(x, y),
    "l1": lambda: F.l1_loss(x, y),
    "gelu_bw": lambda: aten.gelu_backward(y, x),
    "silu_bw": lambda: aten.silu_backward(y, x),
    "threshold_bw": lambda: aten.threshold_backward(y, x, 0.0),
    "mm": lambda: x @ y,
    "mm_bf16": lambda: xb @ xb,
    "bmm": lambda: torch.bmm(x4[0], x4[1]),
    "conv2d": lambda: F.conv2d(x4, w4, padding=1),
    "sdpa": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
    "upsample_nearest": lambda: F.interpolate(x4, scale_factor=2),
    "upsample_bilinear": lambda: F.interpolate(x4, scale_factor=2, mode="bilinear"),
    "pad": lambda: F.pad(x, (0, 1)),
    "max_pool": lambda: F.max_pool2d(x4, 2),
    "avg_pool": lambda: F.avg_pool2d(x4, 2),
    "adaptive_avg": lambda: F.adaptive_avg_pool2d(x4, 1),
    "one_hot": lambda: F.one_hot(seq, 16),
    "tril": lambda: x.tril(),
    "repeat_interleave": lambda: idx.repeat_interleave(2),
    "flip": lambda: x.flip(0),
    "roll": lambda: x.roll(1, 0),
    "foreach_add": lambda: torch._foreach_add_(lst, lst2),
    "foreach_mul": lambda: torch._foreach_mul_(lst, 0.9),
    "foreach_lerp": lambda: torch._foreach_lerp_(lst, lst2, 0.1),
    "foreach_addcmul": lambda: torch._foreach_addcmul_(lst, lst2, lst3),
    "foreach_sqrt": lambda: torch._foreach_sqrt(lst),
    "foreach_norm": lambda: torch._foreach_norm(lst),
    "fused_adamw": lambda: torch._fused_adamw_(
        lst,
        lst2,
        lst3,
        [t.clone() for t in lst3],
        [],
        steps,
        lr=1e-3,
        beta1=0.9,
        beta2=0.999,
        weight_decay=0.01,
        eps=1e-8,
        amsgrad=False,
        maximize=False,
    ),
    "addcmul": lambda: x.addcmul(y, y),
    "lerp": lambda: x.lerp(y, 0.1),
}
if sys.argv[1] == "all":
    for k, f in OPS.items():
        mark(f"op {k}".encode())
        try:
            f()
            dev == "cuda" and torch.cuda.synchronize()
        except Exception as e:
            print("failed", k, repr(e)[:200])
else:
    x.fill_(1.0)
    dev == "cuda" and torch.cuda.synchronize()
    k = sys.argv[2]
    mark(f"op {k}".encode())
    OPS[k]()
    dev == "cuda" and torch.cuda.synchronize()
mark(b"end")
print(len(OPS))
