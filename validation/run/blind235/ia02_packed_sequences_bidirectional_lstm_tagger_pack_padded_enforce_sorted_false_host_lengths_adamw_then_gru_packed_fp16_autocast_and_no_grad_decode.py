"""Variable-length sequence models through packed sequences: a 2-layer bidirectional LSTM tagger
(embedding 300, hidden 512) over `pack_padded_sequence(..., enforce_sorted=False)` with lengths drawn on
the host (sorted and unsorted by the call itself), `pad_packed_sequence` back, a per-token
cross-entropy over the padded positions masked by `ignore_index`; AdamW (foreach). Then a 3-layer GRU
encoder over packed sequences under fp16 autocast with GradScaler and Adam; and a no_grad pass of both
at a larger batch.

Phases: LSTM tagger 3 steps at batch 64 x up to 200 tokens; GRU 3 steps at batch 128 x up to 120;
no_grad pass of both at batch 256. Lengths fixed by the seed; no value-dependent sizes. 3 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.manual_seed(2352)
V, TAGS = 20000, 45


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 300, padding_idx=0)
        self.lstm = nn.LSTM(300, 512, num_layers=2, batch_first=True, bidirectional=True, dropout=0.2)
        self.out = nn.Linear(1024, TAGS)

    def forward(self, ids, lengths):
        packed = pack_padded_sequence(self.emb(ids), lengths, batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = pad_packed_sequence(h, batch_first=True, total_length=ids.shape[1])
        return self.out(h)


def batch(b, t):
    lengths = torch.randint(t // 4, t + 1, (b,))
    lengths[0] = t
    ids = torch.randint(1, V, (b, t))
    ids[torch.arange(t)[None, :] >= lengths[:, None]] = 0
    return ids.cuda(), lengths


tagger = Tagger().cuda()
opt = torch.optim.AdamW(tagger.parameters(), lr=1e-3, foreach=True)
for step in range(3):
    ids, lengths = batch(64, 200)
    tags = torch.randint(0, TAGS, ids.shape, device="cuda").masked_fill(ids == 0, -100)
    loss = F.cross_entropy(tagger(ids, lengths).flatten(0, 1), tags.flatten(), ignore_index=-100)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("tagger step", step, loss.item())
del loss
report("bilstm tagger packed")

emb = nn.Embedding(V, 256, padding_idx=0).cuda()
gru = nn.GRU(256, 768, num_layers=3, batch_first=True).cuda()
head = nn.Linear(768, 2).cuda()
params = [*emb.parameters(), *gru.parameters(), *head.parameters()]
opt2 = torch.optim.Adam(params, lr=1e-3)
scaler = torch.amp.GradScaler("cuda")
for step in range(3):
    ids, lengths = batch(128, 120)
    with torch.autocast("cuda", dtype=torch.float16):
        _, h = gru(pack_padded_sequence(emb(ids), lengths, batch_first=True, enforce_sorted=False))
        loss = F.cross_entropy(head(h[-1]).float(), torch.randint(0, 2, (128,), device="cuda"))
    scaler.scale(loss).backward()
    scaler.step(opt2)
    scaler.update()
    opt2.zero_grad(set_to_none=True)
    print("gru step", step, loss.item())
del loss, h
report("gru packed fp16 amp")

with torch.no_grad():
    ids, lengths = batch(256, 200)
    print("tagger eval", tuple(tagger(ids, lengths).shape))
    _, h = gru(pack_padded_sequence(emb(ids), lengths, batch_first=True, enforce_sorted=False))
    print("gru eval", tuple(h.shape))
del h
report("no_grad both")
