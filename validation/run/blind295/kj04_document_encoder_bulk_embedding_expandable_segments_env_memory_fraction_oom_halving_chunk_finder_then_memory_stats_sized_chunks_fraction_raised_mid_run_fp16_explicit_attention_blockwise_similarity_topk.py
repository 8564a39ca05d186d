"""Bulk document embedding under a memory budget, chunk sizes found by the program itself:
`PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"` set in `os.environ` before torch is imported and
`torch.cuda.set_per_process_memory_fraction(0.1)`; a hand-written fp16 BERT-style encoder (12 post-LN layers,
d 768, 12 heads, FFN 3,072, explicit `q @ k^T` attention with a key-padding mask, so memory grows with the
chunk times 512^2) run under `torch.inference_mode` over 512-token documents whose true lengths come from a
seeded host RNG; the embedding is the masked mean of the last layer.

Phases: set-up (weights, the host corpus); the chunk finder: a probe chunk of 64 documents gives the
per-document bytes (`torch.cuda.max_memory_allocated()` over the allocation before it), then chunk 2,048 is
tried, on `torch.OutOfMemoryError` halved after `torch.cuda.empty_cache()` until one chunk encodes, and the
chunk is then sized to 80% of the
budget left (`get_device_properties(0).total_memory * fraction - memory_allocated()`), rounded down to a
multiple of 64; encoding 6 chunks of that size, the embeddings kept on the GPU; `set_per_process_memory_fraction(0.2)`
mid-run, the chunk sized again from the same statistics, 4 more chunks; then all embeddings `torch.cat`-ed,
L2-normalized and searched against themselves in blocks of 4,096 rows (`topk(10)` of each block's cosine
scores). 4 phases. The sizes depend on the allocator's figures only."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import math  # noqa: E402
import random  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(2954)
rng = random.Random(29540)
V, D, H, L, T = 30522, 768, 12, 12, 512
fraction = 0.1
torch.cuda.set_per_process_memory_fraction(fraction)
TOTAL = torch.cuda.get_device_properties(0).total_memory


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.o = nn.Linear(D, D)
        self.n1 = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 3072), nn.GELU(), nn.Linear(3072, D))
        self.n2 = nn.LayerNorm(D)

    def forward(self, x, bias):
        b = x.shape[0]
        q, k, v = self.qkv(x).view(b, T, 3, H, D // H).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D // H) + bias
        a = scores.softmax(-1) @ v
        x = self.n1(x + self.o(a.transpose(1, 2).reshape(b, T, D)))
        return self.n2(x + self.ff(x))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        self.norm = nn.LayerNorm(D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))

    def forward(self, ids, mask):
        x = self.norm(self.tok(ids) + self.pos.weight)
        bias = (1.0 - mask[:, None, None, :].half()) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        m = mask[..., None].half()
        return (x * m).sum(1) / m.sum(1)


model = Encoder().cuda().half().eval()
N = 16384
corpus = torch.randint(1000, V, (N, T))
lens = torch.tensor([rng.randint(64, T) for _ in range(N)])
valid = torch.arange(T)[None, :] < lens[:, None]
cursor = 0
report("setup")


def encode(n):
    global cursor
    ids = corpus[cursor : cursor + n].cuda()
    mask = valid[cursor : cursor + n].cuda()
    cursor = (cursor + n) % (N - 4096)
    return model(ids, mask)


def sized_chunk(per_doc):
    budget = TOTAL * fraction - torch.cuda.memory_allocated()
    return max(64, int(0.8 * budget / per_doc) // 64 * 64)


embeddings = []
with torch.inference_mode():
    base = torch.cuda.memory_allocated()
    embeddings.append(encode(64))
    per_doc = (torch.cuda.max_memory_allocated() - base) / 64
    chunk = 2048
    while True:
        oom = False
        try:
            out = encode(chunk)
        except torch.OutOfMemoryError:
            oom = True
        if not oom:
            break
        torch.cuda.empty_cache()
        print(f"chunk {chunk}: out of memory")
        chunk //= 2
    embeddings.append(out)
    del out
    print(f"fits {chunk}, per-document {per_doc:.0f} bytes, chunk now {sized_chunk(per_doc)}")
    chunk = sized_chunk(per_doc)
    report("chunk_finder_oom_halving_expandable_segments")

    for _ in range(6):
        embeddings.append(encode(chunk))
    report("encode_6_chunks_sized_from_memory_stats")

    fraction = 0.2
    torch.cuda.set_per_process_memory_fraction(fraction)
    chunk = sized_chunk(per_doc)
    print(f"fraction {fraction}: chunk {chunk}")
    for _ in range(4):
        embeddings.append(encode(chunk))
    emb = F.normalize(torch.cat(embeddings).float(), dim=1)
    del embeddings
    hits = []
    for start in range(0, emb.shape[0], 4096):
        scores = emb[start : start + 4096] @ emb.T
        hits.append(scores.topk(10, dim=1).indices)
        del scores
    hits = torch.cat(hits)
    print(f"{emb.shape[0]} documents, neighbours {tuple(hits.shape)}")
report("fraction_0_2_chunks_then_blockwise_similarity_topk")
