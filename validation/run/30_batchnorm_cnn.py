"""VGG-style CNN with BatchNorm2d (running stats updated in train, used in eval): training steps with
SGD, then an evaluation pass under torch.no_grad."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

B, IMG = (4, 32) if os.environ.get("SMOKE") else (256, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


def vgg_block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
    )


model = nn.Sequential(
    vgg_block(3, 64),
    vgg_block(64, 128),
    vgg_block(128, 256),
    vgg_block(256, 512),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.BatchNorm1d(512),
    nn.Linear(512, 100),
).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, 100, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"train step {step} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.no_grad():
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, 100, (B,), device=device)
    correct += (model(x).argmax(1) == y).sum().item()
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} correct {correct}")
    torch.cuda.reset_peak_memory_stats()
