"""A TopK sparse autoencoder's decode written with a COO tensor (helper rp, session 62; a variant of
blind275/jp03 that the set does not use): `torch.sparse_coo_tensor(indices, relu(topk values), (N, L))`
then `torch.sparse.mm(latents, W_dec)`, and the backward to the values and the decoder. The backward
runs `mm(grad, W.t()).sparse_mask(latents)` (dense-to-sparse, for the sparse operand) and then, for the
constructor's values, `sparse_mask` of that sparse gradient by the latents (sparse-to-sparse: the
intersection kernel of SparseBinaryOpIntersectionCommon.h / .cu, hashing the indices and searching
them). The twin names that second `aten::sparse_mask` unmeasured ("the intersection's hashing and search
scratch"): its outputs are counted, its scratch is not. On the GPU, record its allocations:

    OUT_PICKLE=/tmp/rp62_sparse_mask.pickle STACKS=python python3 validation/run/history.py \
        validation/run/probes/rp62_sparse_coo_values_sparse_mask_probe_s62.py

(each `sparse_mask` call is also bracketed below by its own allocated/peak lines, through a dispatch
mode that prints the bytes of every op of the backward). Sizes: N 4,096 rows, k 32, L 65,536 latents,
d 1,024: nnz 131,072. Under the twin (6edf9b00's package, GPU=h100) the per-op lines were:
  aten.mm.default (dense grad @ W.t()): allocated +1107296256 (1 GiB, and cuBLAS's 32 MiB workspace of
      the backward thread's handle)
  aten.sparse_mask.default [strided, sparse_coo]: allocated +2621440 peak +3146240
  aten.mm.default [sparse_coo, strided] (W's gradient): allocated +268435456 peak +808717312
  aten.sparse_mask.default [sparse_coo, sparse_coo]: allocated +2621440 peak +2621440 (unmeasured)
The GPU's lines for the last one (and the history's allocations inside it) give its scratch."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

dev = "cuda"
torch.manual_seed(0)
N, K, L, D = 4096, 32, 65536, 1024
W = torch.nn.Parameter(torch.randn(L, D, device=dev) / 32)
pre = torch.randn(N, L, device=dev)
vals, inds = pre.topk(K, dim=-1)
del pre
vals = vals.relu().requires_grad_()
rows = torch.arange(N, device=dev).repeat_interleave(K)
lat = torch.sparse_coo_tensor(torch.stack([rows, inds.flatten()]), vals.flatten(), (N, L))
rec = torch.sparse.mm(lat, W)
torch.cuda.synchronize()


class PerOp(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = func(*args, **(kwargs or {}))
        torch.cuda.synchronize()
        layouts = [a.layout for a in args if isinstance(a, torch.Tensor)]
        print(
            f"{func}: {layouts} allocated +{torch.cuda.memory_allocated() - base} "
            f"peak +{torch.cuda.max_memory_allocated() - base}"
        )
        return out


loss = rec.square().mean()
with PerOp():
    loss.backward()
print("grads", W.grad.layout, tuple(W.grad.shape), tuple(vals.grad.shape))
print("done")
