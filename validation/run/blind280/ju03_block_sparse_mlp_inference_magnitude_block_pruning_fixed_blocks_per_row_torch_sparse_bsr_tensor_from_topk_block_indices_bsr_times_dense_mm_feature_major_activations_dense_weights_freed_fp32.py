"""Block-sparse inference of a transformer MLP stack with PyTorch's BSR layout, the way the sparse docs
suggest for structured pruning: a dense 8-layer MLP stack (d 2048, hidden 8192, GELU, biases,
residual), fp32 with TF32 off, runs once dense; then every weight is magnitude-pruned by 64 x 64
blocks, keeping a fixed number of blocks per block-row (the top-k block norms, so the number of stored
blocks does not depend on the values: 25% density), and is rebuilt as a `torch.sparse_bsr_tensor`
from its crow indices (a fixed stride), its column indices (topk, sorted) and its gathered value
blocks; the dense weights are deleted. The sparse pass keeps the activations feature-major
(features x tokens) so each layer is `torch.mm(W_bsr, h)` plus a bias column (BSR @ strided in
float32 takes PyTorch's reference path, `_compressed_row_strided_mm_out`, not cuSPARSE: the dense
block rows each stored block meets are gathered and multiplied block by block, nnzb x 64 x tokens
floats each, then summed into the result with `index_add_`). 8,192 tokens. Phase 1: dense model
and tokens. Phase 2: the dense no_grad pass. Phase 3: pruning to BSR, dense weights freed. Phase 4:
the block-sparse no_grad pass and its difference from the dense output. Seeded; no value-dependent
sizes."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2803)
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
D, FF, LAYERS, TOKENS, BS, DENSITY = 2048, 8192, 8, 8192, 64, 0.25


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(D, FF)
        self.down = nn.Linear(FF, D)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(x)))


layers = nn.ModuleList(MLP() for _ in range(LAYERS)).to(dev).eval()
x = torch.randn(TOKENS, D, device=dev)
report("dense model")

with torch.no_grad():
    h = x
    for layer in layers:
        h = layer(h)
    dense_out = h
del h
report("dense pass")


def to_block_sparse(w):
    rows, cols = w.shape[0] // BS, w.shape[1] // BS
    k = int(cols * DENSITY)
    blocks = w.view(rows, BS, cols, BS).transpose(1, 2)  # rows x cols x BS x BS
    score = blocks.pow(2).sum((2, 3))
    col = score.topk(k, 1).indices.sort(1).values
    vals = blocks[torch.arange(rows, device=w.device)[:, None], col]  # rows x k x BS x BS
    crow = torch.arange(0, rows * k + 1, k, device=w.device)
    return torch.sparse_bsr_tensor(crow, col.flatten(), vals.reshape(rows * k, BS, BS), w.shape)


sparse = []
with torch.no_grad():
    for layer in layers:
        sparse.append(
            (
                to_block_sparse(layer.up.weight),
                layer.up.bias.clone()[:, None],
                to_block_sparse(layer.down.weight),
                layer.down.bias.clone()[:, None],
            )
        )
del layers
print("stored blocks per layer", sparse[0][0].values().shape[0] + sparse[0][2].values().shape[0])
report("prune")

with torch.no_grad():
    h = x.t().contiguous()  # features x tokens
    for w1, b1, w2, b2 in sparse:
        h = h + (torch.mm(w2, F.gelu(torch.mm(w1, h) + b1)) + b2)
    sparse_out = h.t()
    rel = (sparse_out - dense_out).norm() / dense_out.norm()
print("relative difference", rel.item())
report("end")
