"""A named-entity tagger: embeddings, a 2-layer bidirectional LSTM over packed sequences
(pad_sequence of 64 sentences whose lengths are drawn on the host, pack_padded_sequence with
enforce_sorted=False), emission scores, and a linear-chain CRF's log partition computed by a
logsumexp recursion over time, fp32, Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4503)
B, V, E, H, T, MAXLEN = (4, 100, 16, 16, 5, 12) if SMALL else (64, 30000, 300, 512, 17, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, E, padding_idx=0)
        self.lstm = nn.LSTM(E, H, num_layers=2, bidirectional=True, batch_first=True)
        self.proj = nn.Linear(2 * H, T)
        self.trans = nn.Parameter(torch.randn(T, T) * 0.01)

    def forward(self, ids, lengths):
        packed = pack_padded_sequence(self.emb(ids), lengths, batch_first=True, enforce_sorted=False)
        out, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True)
        emissions = self.proj(out)
        alpha = emissions[:, 0]
        for t in range(1, emissions.shape[1]):
            nxt = torch.logsumexp(alpha[:, :, None] + self.trans[None] + emissions[:, t, None, :], dim=1)
            live = (lengths.to(ids.device) > t)[:, None]
            alpha = torch.where(live, nxt, alpha)
        return torch.logsumexp(alpha, dim=1).mean()


model = Tagger().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    lengths = torch.randint(4, MAXLEN + 1, (B,))
    ids = pad_sequence([torch.randint(1, V, (int(n),)) for n in lengths], batch_first=True).to(device)
    loss = model(ids, lengths)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
