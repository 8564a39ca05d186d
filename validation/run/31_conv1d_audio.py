"""Raw-waveform audio classifier (M5-style): Conv1d stack with BatchNorm1d, MaxPool1d, global average
pooling, trained with Adam on 1-second 16 kHz clips."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

B, SAMPLES = (2, 4000) if os.environ.get("SMOKE") else (128, 16000)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class M5(nn.Module):
    def __init__(self, n_output=35, stride=16, n_channel=128):
        super().__init__()
        self.conv1 = nn.Conv1d(1, n_channel, kernel_size=80, stride=stride)
        self.bn1 = nn.BatchNorm1d(n_channel)
        self.pool1 = nn.MaxPool1d(4)
        self.conv2 = nn.Conv1d(n_channel, n_channel, kernel_size=3)
        self.bn2 = nn.BatchNorm1d(n_channel)
        self.pool2 = nn.MaxPool1d(4)
        self.conv3 = nn.Conv1d(n_channel, 2 * n_channel, kernel_size=3)
        self.bn3 = nn.BatchNorm1d(2 * n_channel)
        self.pool3 = nn.MaxPool1d(4)
        self.conv4 = nn.Conv1d(2 * n_channel, 2 * n_channel, kernel_size=3)
        self.bn4 = nn.BatchNorm1d(2 * n_channel)
        self.fc1 = nn.Linear(2 * n_channel, n_output)

    def forward(self, x):
        x = self.pool1(F.relu(self.bn1(self.conv1(x))))
        x = self.pool2(F.relu(self.bn2(self.conv2(x))))
        x = self.pool3(F.relu(self.bn3(self.conv3(x))))
        x = F.relu(self.bn4(self.conv4(x)))
        x = F.avg_pool1d(x, x.shape[-1])
        return F.log_softmax(self.fc1(x.permute(0, 2, 1)), dim=2)


model = M5().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.0001)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    waveform = torch.randn(B, 1, SAMPLES, device=device)
    target = torch.randint(0, 35, (B,), device=device)
    output = model(waveform)
    loss = F.nll_loss(output.squeeze(), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
