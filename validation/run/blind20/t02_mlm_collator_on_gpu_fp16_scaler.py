"""BERT-style masked-language-model pretraining with the data collation done on the GPU: 15% of tokens
chosen by torch.bernoulli, labels set to -100 elsewhere (labels[~chosen] = -100), 80% of the chosen
replaced by a [MASK] id and 10% by random ids through boolean-mask assignments, special positions
restored with list indexing; a hand-written 6-layer encoder (nn.TransformerEncoderLayer, GELU, batch
first) under fp16 autocast with GradScaler and AdamW, batch 64 x 256, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2002)
VOCAB, WIDTH, DEPTH, B, T = (300, 32, 2, 4, 16) if SMALL else (30522, 512, 6, 64, 256)
MASK_ID, CLS_ID, SEP_ID = 103, 101, 102
device = "cuda" if torch.cuda.is_available() else "cpu"


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Embedding(T, WIDTH)
        layer = nn.TransformerEncoderLayer(
            WIDTH, 8, 4 * WIDTH, dropout=0.1, activation="gelu", batch_first=True
        )
        self.layers = nn.TransformerEncoder(layer, DEPTH, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(WIDTH)
        self.out = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids):
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        return self.out(self.norm(self.layers(x)))


def collate(ids):
    labels = ids.clone()
    chosen = torch.bernoulli(torch.full(ids.shape, 0.15, device=ids.device)).bool()
    chosen[:, [0, -1]] = False
    labels[~chosen] = -100
    replace = torch.bernoulli(torch.full(ids.shape, 0.8, device=ids.device)).bool() & chosen
    ids[replace] = MASK_ID
    rand = torch.bernoulli(torch.full(ids.shape, 0.5, device=ids.device)).bool() & chosen & ~replace
    ids = torch.where(rand, torch.randint_like(ids, VOCAB), ids)
    ids[:, 0] = CLS_ID
    ids[:, -1] = SEP_ID
    return ids, labels


model = Encoder().to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids, labels = collate(torch.randint(min(1000, VOCAB // 2), VOCAB, (B, T), device=device))
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        logits = model(ids)
        loss = F.cross_entropy(logits.view(-1, VOCAB).float(), labels.view(-1), ignore_index=-100)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
