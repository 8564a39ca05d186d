"""A bidirectional LSTM text classifier trained on padded, packed batches whose lengths change every
step, with PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:[256:1,512:2,1024:4,>:8] set before torch is
imported (requests rounded up to power-of-two divisions by size band). Embedding 20,000 x 256, a 2-layer
bidirectional nn.LSTM of hidden 384 (batch_first, cuDNN), masked mean pooling over the padded output of
pad_packed_sequence, a 2-layer MLP head over 5 classes; fp32, Adam (lr 1e-3), clipping at 5.

Batches of 48 sentences, lengths drawn on the host by a seeded random.Random from one of four buckets
({8-32, 32-64, 64-128, 128-256} tokens, bucket chosen per batch), padded to the batch's longest and packed
with pack_padded_sequence(enforce_sorted=False) (the lengths tensor stays on the host).

Phases: set-up; 75 steps; 75 more steps; evaluation under no_grad over 20 batches of 96; 50 steps with
torch.cuda.empty_cache() every 10 steps. 5 phases. Every shape comes from the host RNG."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"

import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.manual_seed(25504)
rng = random.Random(255040)
V, E, H, C = 20000, 256, 384, 5
BUCKETS = [(8, 32), (32, 64), (64, 128), (128, 256)]


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, E, padding_idx=0)
        self.lstm = nn.LSTM(E, H, num_layers=2, bidirectional=True, batch_first=True, dropout=0.1)
        self.head = nn.Sequential(nn.Linear(2 * H, H), nn.ReLU(), nn.Linear(H, C))

    def forward(self, ids, lengths):
        packed = pack_padded_sequence(self.emb(ids), lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
        mask = (ids != 0).unsqueeze(-1).to(out.dtype)
        pooled = (out * mask).sum(1) / mask.sum(1)
        return self.head(pooled)


model = Classifier().cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    lo, hi = rng.choice(BUCKETS)
    lengths = [rng.randint(lo, hi) for _ in range(n)]
    ids = torch.zeros(n, max(lengths), dtype=torch.long)
    for i, L in enumerate(lengths):
        ids[i, :L] = torch.randint(1, V, (L,))
    labels = torch.tensor([rng.randrange(C) for _ in range(n)])
    return ids.cuda(), torch.tensor(lengths), labels.cuda()


def train(steps, empty_every=0):
    model.train()
    for i in range(steps):
        ids, lengths, labels = batch(48)
        loss = F.cross_entropy(model(ids, lengths), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        del ids, labels, loss
        if empty_every and (i + 1) % empty_every == 0:
            torch.cuda.empty_cache()


report("setup")
train(75)
report("train_steps_0_74")
train(75)
report("train_steps_75_149")

model.eval()
hits = torch.zeros((), dtype=torch.long, device="cuda")
with torch.no_grad():
    for _ in range(20):
        ids, lengths, labels = batch(96)
        hits += (model(ids, lengths).argmax(-1) == labels).sum()
        del ids, labels
print(f"eval accuracy {hits.item() / (20 * 96):.3f}")
report("eval_no_grad_20_batches_of_96")

train(50, empty_every=10)
report("train_50_steps_empty_cache_every_10")
