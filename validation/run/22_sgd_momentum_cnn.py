"""A plain CIFAR-style CNN (conv/ReLU/max-pool, dropout, linear head) with SGD momentum."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

B = 4 if os.environ.get("SMOKE") else 512
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, padding=1)
        self.conv2 = nn.Conv2d(64, 128, 3, padding=1)
        self.conv3 = nn.Conv2d(128, 256, 3, padding=1)
        self.pool = nn.MaxPool2d(2, 2)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(256 * 4 * 4, 512)
        self.fc2 = nn.Linear(512, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = self.pool(F.relu(self.conv3(x)))
        x = torch.flatten(x, 1)
        x = self.dropout(F.relu(self.fc1(x)))
        return self.fc2(x)


net = Net().to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

for epoch in range(3):
    inputs = torch.randn(B, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (B,), device=device)
    optimizer.zero_grad()
    outputs = net(inputs)
    loss = criterion(outputs, labels)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(f"[{epoch}] loss: {loss.item():.3f} max allocated {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
