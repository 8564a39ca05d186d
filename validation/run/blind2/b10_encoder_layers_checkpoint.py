"""Stack of nn.TransformerEncoderLayer(batch_first=True, ReLU, post-norm) as a token classifier:
one AdamW step plain, then two with torch.utils.checkpoint(use_reentrant=False) around each layer."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

D, HEADS, FF, LAYERS, B, SEQ, VOCAB, TAGS = (
    (32, 4, 64, 2, 2, 16, 100, 5) if os.environ.get("SMOKE") else (512, 8, 2048, 12, 32, 512, 30000, 17)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(5)


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.zeros(1, SEQ, D))
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=FF, dropout=0.1, batch_first=True)
            for _ in range(LAYERS)
        )
        self.classifier = nn.Linear(D, TAGS)
        self.use_checkpoint = False

    def forward(self, tokens, padding_mask):
        x = self.embed(tokens) + self.pos[:, : tokens.shape[1]]
        for layer in self.layers:
            if self.use_checkpoint:
                x = checkpoint(layer, x, None, padding_mask, use_reentrant=False)
            else:
                x = layer(x, src_key_padding_mask=padding_mask)
        return self.classifier(x)


model = Tagger().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    model.use_checkpoint = step > 0
    tokens = torch.randint(1, VOCAB, (B, SEQ), device=device)
    lengths = torch.randint(SEQ // 2, SEQ + 1, (B,), device=device)
    padding_mask = torch.arange(SEQ, device=device)[None, :] >= lengths[:, None]
    tags = torch.randint(0, TAGS, (B, SEQ), device=device).masked_fill(padding_mask, -100)
    logits = model(tokens, padding_mask)
    loss = F.cross_entropy(logits.reshape(-1, TAGS), tags.reshape(-1), ignore_index=-100)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} checkpoint={model.use_checkpoint} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    print(f"loss {loss.item():.4f}")
