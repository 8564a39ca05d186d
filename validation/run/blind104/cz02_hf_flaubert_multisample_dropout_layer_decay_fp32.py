"""HF transformers FlauBERT (XLM-style post-norm encoder with sinusoidal-free learned positions)
built from a config at 12 layers, 768 wide, 12 heads, vocabulary 68,729, fine-tuned in fp32 for
5-class sentence classification with a multi-sample dropout head (the first token's state through
5 dropout masks, one shared linear classifier, the 5 cross entropies averaged) and layer-wise
learning-rate decay (0.85 per layer from the top; one AdamW parameter group per layer, the
embeddings lowest); batch 16 of up to 256 tokens, lengths drawn on the host, padded ids and the
attention mask copied to the GPU; 3 steps; then a no_grad eval over 64 sentences; 5 phases."""

import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import FlaubertConfig, FlaubertModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10402)
rng = random.Random(10402)
if SMALL:
    cfg = FlaubertConfig(vocab_size=128, emb_dim=32, n_layers=2, n_heads=4)
    B, BE, S = 2, 4, 24
else:
    cfg = FlaubertConfig(vocab_size=68729, emb_dim=768, n_layers=12, n_heads=12, max_position_embeddings=512)
    B, BE, S = 16, 64, 256
NCLS, NDROP, DECAY = 5, 5, 0.85
device = "cuda" if torch.cuda.is_available() else "cpu"


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = FlaubertModel(cfg)
        self.drops = nn.ModuleList(nn.Dropout(0.1 + 0.1 * i) for i in range(NDROP))
        self.fc = nn.Linear(cfg.emb_dim, NCLS)

    def forward(self, ids, mask):
        h = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
        return [self.fc(d(h)) for d in self.drops]


def batch(n):
    lens = [rng.randint(S // 4, S) for _ in range(n)]
    ids = [
        [rng.randint(10, cfg.vocab_size - 1) for _ in range(k)] + [cfg.pad_token_id] * (S - k) for k in lens
    ]
    mask = [[1] * k + [0] * (S - k) for k in lens]
    return torch.tensor(ids).to(device), torch.tensor(mask).to(device)


model = Classifier().to(device)
enc = model.encoder
L = cfg.n_layers
groups = [
    {
        "params": list(enc.embeddings.parameters())
        + list(enc.position_embeddings.parameters())
        + list(enc.layer_norm_emb.parameters()),
        "lr": 2e-5 * DECAY**L,
    }
]
for i in range(L):
    layer = [enc.attentions[i], enc.layer_norm1[i], enc.ffns[i], enc.layer_norm2[i]]
    groups.append({"params": [p for m in layer for p in m.parameters()], "lr": 2e-5 * DECAY ** (L - 1 - i)})
groups.append({"params": list(model.fc.parameters()), "lr": 1e-4})
optimizer = torch.optim.AdamW(groups, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    ids, mask = batch(B)
    y = torch.randint(0, NCLS, (B,), device=device)
    outs = model(ids, mask)
    loss = sum(F.cross_entropy(o, y) for o in outs) / NDROP
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del outs, loss
model.eval()
with torch.no_grad():
    ids, mask = batch(BE)
    pred = torch.stack(model(ids, mask)).mean(0).argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
