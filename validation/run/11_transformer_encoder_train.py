"""nn.TransformerEncoder (norm_first, GELU, dropout) training as a sequence classifier with Adam."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

B, S, D, HEADS, LAYERS, VOCAB = (
    (2, 16, 64, 4, 2, 100) if os.environ.get("SMOKE") else (16, 256, 512, 8, 6, 30000)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.zeros(1, S, D))
        layer = nn.TransformerEncoderLayer(
            D, HEADS, dim_feedforward=4 * D, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(D, 2)

    def forward(self, tokens, pad_mask):
        x = self.embed(tokens) + self.pos
        x = self.encoder(x, src_key_padding_mask=pad_mask)
        return self.head(x.mean(dim=1))


model = Classifier().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    tokens = torch.randint(0, VOCAB, (B, S), device=device)
    pad_mask = torch.zeros(B, S, dtype=torch.bool, device=device)
    pad_mask[:, S - S // 8 :] = True
    labels = torch.randint(0, 2, (B,), device=device)
    loss = F.cross_entropy(model(tokens, pad_mask), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
