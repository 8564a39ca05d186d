"""2:4 semi-structured sparsity for inference, as PyTorch's tutorial does it
(`torch.sparse.to_sparse_semi_structured`, cuSPARSELt on sm_90): two stacks of transformer MLP blocks in
fp16, ViT-B sized (768 -> 3072 -> 768, 6 blocks) and BERT-large sized (1024 -> 4096 -> 1024, 4 blocks), each
Linear's weight magnitude-pruned to 2:4 (the two smallest of every four kept at zero) and then swapped for
its semi-structured form (`nn.Parameter(to_sparse_semi_structured(w))`). Dense inference first at 4,096
tokens, then the swap, then sparse inference at 4,096 and at 8,192 tokens, under inference_mode.

No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured

SparseSemiStructuredTensor._FORCE_CUTLASS = False
torch.manual_seed(2441)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def mlp_stack(d, hidden, n):
    return nn.Sequential(
        *[nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d)) for _ in range(n)]
    ).to(device="cuda", dtype=torch.float16)


def prune_2_4(w):
    groups = w.detach().abs().view(-1, 4)
    keep = torch.zeros_like(groups, dtype=torch.bool)
    keep.scatter_(1, groups.topk(2, dim=1).indices, True)
    return (w.detach().view(-1, 4) * keep).view_as(w)


vit = mlp_stack(768, 3072, 6).eval()
bert = mlp_stack(1024, 4096, 4).eval()
report("setup")

with torch.inference_mode():
    a = vit(torch.randn(4096, 768, device="cuda", dtype=torch.float16))
    b = bert(torch.randn(4096, 1024, device="cuda", dtype=torch.float16))
    del a, b
report("dense_inference_4096_tokens")

with torch.no_grad():
    for model in (vit, bert):
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.weight = nn.Parameter(to_sparse_semi_structured(prune_2_4(module.weight)))
report("prune_and_compress")

with torch.inference_mode():
    for tokens in (4096, 8192):
        a = vit(torch.randn(tokens, 768, device="cuda", dtype=torch.float16))
        b = bert(torch.randn(tokens, 1024, device="cuda", dtype=torch.float16))
        del a, b
report("sparse_inference_4096_and_8192_tokens")
