"""A 2-layer bidirectional GRU tagger over packed variable-length sequences
(pack_padded_sequence with enforce_sorted=False, lengths on the host, pad_packed_sequence back),
fp32, batch 32 of up to 400 steps, 256 inputs and 512 hidden, a linear tag head with
cross_entropy ignoring padding, Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2606)
B, T, I, H = (3, 12, 8, 16) if SMALL else (32, 400, 256, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"
emb = nn.Linear(I, I).to(device)
gru = nn.GRU(I, H, num_layers=2, bidirectional=True, batch_first=True).to(device)
tagger = nn.Linear(2 * H, 20).to(device)
optimizer = torch.optim.Adam([*emb.parameters(), *gru.parameters(), *tagger.parameters()], lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    lengths = torch.randint(T // 2, T + 1, (B,))
    lengths[0] = T
    x = torch.randn(B, T, I, device=device)
    tags = torch.randint(0, 20, (B, T), device=device)
    mask = torch.arange(T)[None, :] >= lengths[:, None]
    tags = tags.masked_fill(mask.to(device), -100)
    packed = pack_padded_sequence(emb(x), lengths, batch_first=True, enforce_sorted=False)
    out, _ = gru(packed)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=T)
    loss = F.cross_entropy(tagger(out).reshape(-1, 20), tags.reshape(-1), ignore_index=-100)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, tags, mask, packed, out, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
