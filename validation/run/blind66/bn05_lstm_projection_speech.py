"""An acoustic model with projected LSTMs (nn.LSTM with proj_size, LSTMP as in speech recognition):
80-dim filterbanks, 4 bidirectional layers of 1,024 cells projected to 320, a frame classifier over
4,000 senones; batch 32 of 800 frames, fp32, Adam with gradient clipping, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6605)
FEAT, HID, PROJ, NL, K, B, T = (8, 16, 8, 2, 10, 2, 20) if SMALL else (80, 1024, 320, 4, 4000, 32, 800)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(FEAT, HID, NL, batch_first=True, bidirectional=True, proj_size=PROJ)
        self.out = nn.Linear(2 * PROJ, K)

    def forward(self, x):
        return self.out(self.lstm(x)[0])


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Model().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    feats = torch.randn(B, T, FEAT, device=device)
    targets = torch.randint(0, K, (B, T), device=device)
    loss = F.cross_entropy(model(feats).reshape(-1, K), targets.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del feats, targets, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
