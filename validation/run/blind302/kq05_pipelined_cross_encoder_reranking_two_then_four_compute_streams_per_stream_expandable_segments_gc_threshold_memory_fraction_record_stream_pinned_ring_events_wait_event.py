"""Bulk reranking with a cross-encoder pipelined over several CUDA streams, under a memory budget:
`PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True,garbage_collection_threshold:0.7"` set in `os.environ`
before torch is imported, and `torch.cuda.set_per_process_memory_fraction(0.05)` (about 4 GiB of an H100), so
every stream grows its own expandable segment and the collector releases cached memory past 70% of the budget.

The model: a hand-written BERT-style cross-encoder in fp16 (vocabulary 30,522, 12 layers, d 768, 12 heads, GELU
MLP 3,072, pre-LayerNorm, SDPA with a boolean key-padding mask), the [CLS] row scored by a linear head.

The pipeline: micro-batch i goes to stream i mod S. Its token ids and lengths are drawn on the host, put in
pinned memory and copied with `non_blocking=True` on the default stream; the worker stream waits for that copy
through an event (`Stream.wait_event`), the ids are marked with `record_stream`, the forward runs there and
its scores are copied back with `non_blocking=True` into the slot's pinned output buffer, an event recorded
after. Before a slot is reused its previous batch is dropped and `Stream.synchronize()` waits for the stream,
then the pinned scores are read. Micro-batches are padded to a multiple of 64 tokens (host-drawn lengths
48..384).

Phases: set-up (model, pinned buffers); 24 micro-batches of 96 pairs on 2 streams; 32 micro-batches of 48 pairs
on 4 streams; the fraction raised to 0.12 and 6 batches of 384 pairs on the default stream alone, the
worker streams idle. 4 phases. No value-dependent sizes."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,garbage_collection_threshold:0.7"

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(3025)
gen = torch.Generator().manual_seed(30250)
VOCAB, D, HEADS, LAYERS, MAXLEN = 30522, 768, 12, 12, 384
torch.cuda.set_per_process_memory_fraction(0.05)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x, keep):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class CrossEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos, self.seg = nn.Embedding(VOCAB, D), nn.Embedding(MAXLEN, D), nn.Embedding(2, D)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, 1)

    def forward(self, ids, lengths):
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device)
        keep = pos[None, :] < lengths[:, None]
        seg = (pos[None, :] >= lengths[:, None] // 3).long()
        x = self.tok(ids) + self.pos(pos) + self.seg(seg)
        for layer in self.layers:
            x = layer(x, keep)
        return self.head(self.ln(x[:, 0])).squeeze(-1)


model = CrossEncoder().cuda().half().eval()
print(f"params {sum(p.numel() for p in model.parameters())}")
report("set-up")


def host_batch(rows):
    lengths = torch.randint(48, MAXLEN + 1, (rows,), generator=gen)
    t = (int(lengths.max()) + 63) // 64 * 64
    ids = torch.randint(1, VOCAB, (rows, t), generator=gen)
    return ids.pin_memory(), lengths.pin_memory()


def pipeline(n_streams, n_batches, rows):
    streams = [torch.cuda.Stream() for _ in range(n_streams)]
    outs = [torch.empty(rows, dtype=torch.float16, pin_memory=True) for _ in range(n_streams)]
    done = [None] * n_streams
    live = [None] * n_streams
    total, best = 0, float("-inf")

    def drain(slot):
        nonlocal total, best
        live[slot] = None
        streams[slot].synchronize()
        total += rows
        best = max(best, float(outs[slot].max()))

    for i in range(n_batches):
        slot = i % n_streams
        if done[slot] is not None:
            drain(slot)
        ids_h, len_h = host_batch(rows)
        ids, lengths = ids_h.cuda(non_blocking=True), len_h.cuda(non_blocking=True)
        copied = torch.cuda.current_stream().record_event()
        s = streams[slot]
        s.wait_event(copied)
        ids.record_stream(s)
        lengths.record_stream(s)
        with torch.cuda.stream(s), torch.no_grad():
            scores = model(ids, lengths)
            outs[slot].copy_(scores, non_blocking=True)
            done[slot] = s.record_event()
        live[slot] = (ids, lengths, scores)
        del ids, lengths, scores
    for slot in range(n_streams):
        if done[slot] is not None:
            drain(slot)
    print(f"{n_streams} streams: scored {total} pairs, best {best:.3f}")


pipeline(2, 24, 96)
report("two streams")

pipeline(4, 32, 48)
report("four streams")

torch.cuda.set_per_process_memory_fraction(0.12)
with torch.no_grad():
    for i in range(6):
        ids_h, len_h = host_batch(384)
        scores = model(ids_h.cuda(non_blocking=True), len_h.cuda(non_blocking=True))
        print(f"batch {i}: top score {scores.float().max().item():.3f}")
        del scores
report("default stream, larger budget")
