"""An LSTM encoder-decoder with Bahdanau (additive) attention, trained by teacher forcing: a 2-layer
bidirectional encoder (hidden 512) over packed source sequences of lengths 200 to 400, a decoder
LSTMCell stepped 120 times in Python, each step attending over the padded encoder outputs; batch 64,
vocabularies 16,000, fp32, Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5604)
B, H, V, TS, TT = (2, 16, 50, (6, 10), 5) if SMALL else (64, 512, 16000, (200, 400), 120)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_embed, self.tgt_embed = nn.Embedding(V, 256), nn.Embedding(V, 256)
        self.encoder = nn.LSTM(256, H, num_layers=2, batch_first=True, bidirectional=True)
        self.cell = nn.LSTMCell(256 + 2 * H, H)
        self.w_enc, self.w_dec = nn.Linear(2 * H, H, bias=False), nn.Linear(H, H)
        self.v = nn.Linear(H, 1, bias=False)
        self.out = nn.Linear(H, V)

    def forward(self, src, lengths, tgt):
        packed = pack_padded_sequence(self.src_embed(src), lengths, batch_first=True, enforce_sorted=False)
        enc, _ = pad_packed_sequence(self.encoder(packed)[0], batch_first=True)
        keys = self.w_enc(enc)
        mask = torch.arange(enc.shape[1], device=src.device)[None] >= lengths.to(src.device)[:, None]
        h = c = enc.new_zeros(src.shape[0], H)
        logits = []
        for t in range(tgt.shape[1]):
            scores = self.v(torch.tanh(keys + self.w_dec(h)[:, None])).squeeze(-1).masked_fill(mask, -1e9)
            context = torch.bmm(F.softmax(scores, -1)[:, None], enc).squeeze(1)
            h, c = self.cell(torch.cat([self.tgt_embed(tgt[:, t]), context], -1), (h, c))
            logits.append(self.out(h))
        return torch.stack(logits, 1)


model = Seq2Seq().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    lengths = torch.linspace(TS[0], TS[1], B).long()
    src = torch.randint(0, V, (B, TS[1]), device=device)
    tgt = torch.randint(0, V, (B, TT + 1), device=device)
    logits = model(src, lengths, tgt[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del src, tgt, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
