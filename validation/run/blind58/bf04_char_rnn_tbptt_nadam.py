"""A character-level language model on nn.RNN (tanh, 3 layers, 1,024 hidden, dropout 0.2) trained
with truncated backpropagation through time: 4 chunks of 256 steps at batch 64, the hidden state
carried and detached between chunks, NAdam with decoupled weight decay, gradient clipping by value;
fp32; then sampling 200 characters one step at a time under no_grad; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5804)
B, CH, V, H, NS = (2, 8, 20, 16, 5) if SMALL else (64, 256, 256, 1024, 200)


class CharRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, 256 if not SMALL else 8)
        self.rnn = nn.RNN(self.embed.embedding_dim, H, num_layers=3, dropout=0.2, batch_first=True)
        self.head = nn.Linear(H, V)

    def forward(self, x, h=None):
        y, h = self.rnn(self.embed(x), h)
        return self.head(y), h


device = "cuda" if torch.cuda.is_available() else "cpu"
model = CharRNN().to(device)
optimizer = torch.optim.NAdam(model.parameters(), lr=2e-3, weight_decay=0.01, decoupled_weight_decay=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
text = torch.randint(0, V, (B, 4 * CH + 1), device=device)
h = None
for chunk in range(4):
    x = text[:, chunk * CH : (chunk + 1) * CH]
    y = text[:, chunk * CH + 1 : (chunk + 1) * CH + 1]
    logits, h = model(x, h)
    h = h.detach()
    loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, logits, loss
    if device == "cuda":
        print(
            f"chunk {chunk} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad():
    c = torch.zeros(1, 1, dtype=torch.long, device=device)
    hs, out = None, []
    for _ in range(NS):
        logits, hs = model(c, hs)
        c = torch.multinomial(F.softmax(logits[:, -1] / 0.8, dim=-1), 1)
        out.append(c)
    sample = torch.cat(out, dim=1)
if device == "cuda":
    print(f"sample {tuple(sample.shape)} peak {torch.cuda.max_memory_allocated()}")
