"""A GRU sequence-to-sequence model: embedding, a 2-layer bidirectional GRU encoder over
pack_padded_sequence (lengths sorted, on the CPU), a 2-layer GRU decoder with teacher forcing from the
encoder's final states, cross-entropy with ignore_index over padded targets; fp32, Adam, batch 64,
source up to 120 and target 100 tokens, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

SMALL = bool(os.environ.get("SMOKE"))
VOCAB, EMB, HID = (50, 16, 16) if SMALL else (16000, 512, 512)
BATCH, SRC, TGT = (4, 12, 10) if SMALL else (64, 120, 100)
torch.manual_seed(1303)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_emb = nn.Embedding(VOCAB, EMB, padding_idx=0)
        self.tgt_emb = nn.Embedding(VOCAB, EMB, padding_idx=0)
        self.encoder = nn.GRU(EMB, HID, num_layers=2, bidirectional=True, batch_first=True)
        self.bridge = nn.Linear(2 * HID, HID)
        self.decoder = nn.GRU(EMB, HID, num_layers=2, batch_first=True)
        self.out = nn.Linear(HID, VOCAB)

    def forward(self, src, lengths, tgt_in):
        packed = pack_padded_sequence(self.src_emb(src), lengths, batch_first=True)
        enc, h = self.encoder(packed)
        enc, _ = pad_packed_sequence(enc, batch_first=True)
        h = h.view(2, 2, src.shape[0], HID)
        h0 = torch.tanh(self.bridge(torch.cat([h[:, 0], h[:, 1]], dim=-1))).contiguous()
        dec, _ = self.decoder(self.tgt_emb(tgt_in), h0)
        return self.out(dec)


model = Seq2Seq().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
g = torch.Generator().manual_seed(13)
for step in range(3):
    lengths = torch.sort(torch.randint(SRC // 2, SRC + 1, (BATCH,), generator=g), descending=True).values
    src = torch.randint(1, VOCAB, (BATCH, SRC), device=device)
    tgt = torch.randint(1, VOCAB, (BATCH, TGT + 1), device=device)
    logits = model(src, lengths, tgt[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1), ignore_index=0)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
