"""An allocator setting changed at run time: a GRU tagger first trained with the default caching
allocator on batches of variable length (fragmenting it), then `torch.cuda.memory._set_allocator_settings(
"expandable_segments:True")` after `empty_cache()` and trained on the same lengths again; 2-layer
bidirectional GRU of width 1024 over embeddings of 512 and a 5,000-tag head, batch 64 of lengths
300 to 1,500, fp32, Adam, 3 steps per setting; 7 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5405)
B, E, H, TAGS, LENS = (2, 16, 32, 50, (5, 9, 7)) if SMALL else (64, 512, 1024, 5000, (300, 1500, 900))
device = "cuda" if torch.cuda.is_available() else "cpu"


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(30000, E)
        self.rnn = nn.GRU(E, H, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * H, TAGS)

    def forward(self, ids):
        return self.head(self.rnn(self.embed(ids))[0])


model = Tagger().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for setting in ("default", "expandable"):
    if setting == "expandable" and device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    for t in LENS:
        ids = torch.randint(0, 30000, (B, t), device=device)
        tags = torch.randint(0, TAGS, (B, t), device=device)
        loss = F.cross_entropy(model(ids).flatten(0, 1), tags.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del ids, tags, loss
        if device == "cuda":
            peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
            print(f"{setting} {t} peak {peak} reserved {reserved}")
            torch.cuda.reset_peak_memory_stats()
