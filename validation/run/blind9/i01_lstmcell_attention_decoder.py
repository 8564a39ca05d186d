"""A seq2seq decoder stepped by hand: a GRU encoder (2 layers, bidirectional) over 200 source tokens, then
48 decoder steps of `nn.LSTMCell` (1024 hidden) with additive (Bahdanau) attention over the encoder's
states and teacher forcing, cross-entropy over a 16k vocabulary summed over steps; Adam, batch 64, 2 steps."""

import os

import torch
from torch import nn
from torch.nn import functional as F

SMALL = bool(os.environ.get("SMOKE"))
BATCH, SRC, STEPS, HIDDEN, VOCAB = (2, 10, 4, 32, 100) if SMALL else (64, 200, 48, 1024, 16000)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(901)


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_embed = nn.Embedding(VOCAB, 256)
        self.encoder = nn.GRU(256, HIDDEN // 2, num_layers=2, bidirectional=True, batch_first=True)
        self.tgt_embed = nn.Embedding(VOCAB, 256)
        self.cell = nn.LSTMCell(256 + HIDDEN, HIDDEN)
        self.query = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.key = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.energy = nn.Linear(HIDDEN, 1, bias=False)
        self.out = nn.Linear(2 * HIDDEN, VOCAB)

    def forward(self, src, tgt):
        memory, _ = self.encoder(self.src_embed(src))
        keys = self.key(memory)
        h = memory.new_zeros(src.shape[0], HIDDEN)
        c = memory.new_zeros(src.shape[0], HIDDEN)
        context = memory.new_zeros(src.shape[0], HIDDEN)
        loss = 0.0
        for t in range(tgt.shape[1] - 1):
            h, c = self.cell(torch.cat([self.tgt_embed(tgt[:, t]), context], -1), (h, c))
            scores = self.energy(torch.tanh(keys + self.query(h)[:, None])).squeeze(-1)
            context = torch.bmm(scores.softmax(-1)[:, None], memory).squeeze(1)
            loss = loss + F.cross_entropy(self.out(torch.cat([h, context], -1)), tgt[:, t + 1])
        return loss / (tgt.shape[1] - 1)


model = Seq2Seq().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    src = torch.randint(0, VOCAB, (BATCH, SRC), device=device)
    tgt = torch.randint(0, VOCAB, (BATCH, STEPS + 1), device=device)
    loss = model(src, tgt)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
