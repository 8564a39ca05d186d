"""A speech recognizer trained with CTC: a strided Conv1d front end over 80 mel bins, a 3-layer
bidirectional LSTM (512 per direction), a linear head to 32 symbols, `log_softmax` and `F.ctc_loss` with
padded int64 targets on the GPU and per-utterance input and target lengths; Adam, clip_grad_norm_,
batch 32 of 1,600 frames, 3 steps."""

import os

import torch
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
BATCH, FRAMES, HIDDEN, MAXLEN = (2, 64, 16, 8) if SMALL else (32, 1600, 512, 200)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(805)


class Recognizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.front = nn.Sequential(nn.Conv1d(80, 256, 5, stride=2, padding=2), nn.GELU(), nn.Conv1d(256, 256, 5, padding=2), nn.GELU())
        self.lstm = nn.LSTM(256, HIDDEN, num_layers=3, bidirectional=True, batch_first=True, dropout=0.1)
        self.head = nn.Linear(2 * HIDDEN, 32)

    def forward(self, mels):
        x = self.front(mels).transpose(1, 2)
        x, _ = self.lstm(x)
        return self.head(x).log_softmax(-1)


model = Recognizer().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    mels = torch.randn(BATCH, 80, FRAMES, device=device)
    log_probs = model(mels).transpose(0, 1)
    steps = log_probs.shape[0]
    input_lengths = torch.randint(steps // 2, steps + 1, (BATCH,), device=device)
    target_lengths = torch.randint(MAXLEN // 2, MAXLEN + 1, (BATCH,), device=device)
    targets = torch.randint(1, 32, (BATCH, MAXLEN), device=device)
    loss = nn.functional.ctc_loss(log_probs, targets, input_lengths, target_lengths, zero_infinity=True)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
