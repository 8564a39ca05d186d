"""The "Deep Learning with PyTorch" book's chapter 8 (Stevens, Antiga, Viehmann) on a CIFAR-2-like task
(birds vs airplanes, 32 x 32 RGB): ``NetResDeep`` with 100 residual blocks built the book's way,
``nn.Sequential(*(n_blocks * [ResBlock(n_chans=n_chans1)]))`` -- list multiplication, so the *same* block
(one conv, one BatchNorm) is applied 100 times and its activations are kept 100 times for backward --
each block initialised as in the book (``kaiming_normal_`` conv weight, BatchNorm weight 0.5, bias 0).
The book's ``training_loop(n_epochs, optimizer, model, loss_fn, train_loader)`` and ``validate`` are
used as written: a ``DataLoader`` over a CPU ``TensorDataset`` (shuffle, batch 64), batches moved with
``.to(device=device)``, ``loss_train += loss.item()``, accuracy from ``torch.max(outputs, dim=1)``.

Phases: 0 data on the CPU and the model on the GPU; 1 the book's training_loop in fp32 with plain SGD
(2 epochs); 2 the book's validate under no_grad on train and val loaders; 3 the book's
``training_loop_l2reg`` (``l2_norm = sum(p.pow(2.0).sum() for p in model.parameters())``) on a fresh
NetResDeep under fp16 autocast with GradScaler, batch 128; 4 inference_mode predictions with softmax
probabilities over the validation set in batches of 512 in eval mode."""

import datetime

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(123)
device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def report(tag):
    if device.type == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class ResBlock(nn.Module):
    def __init__(self, n_chans):
        super().__init__()
        self.conv = nn.Conv2d(n_chans, n_chans, kernel_size=3, padding=1, bias=False)
        self.batch_norm = nn.BatchNorm2d(num_features=n_chans)
        torch.nn.init.kaiming_normal_(self.conv.weight, nonlinearity="relu")
        torch.nn.init.constant_(self.batch_norm.weight, 0.5)
        torch.nn.init.zeros_(self.batch_norm.bias)

    def forward(self, x):
        out = self.conv(x)
        out = self.batch_norm(out)
        out = torch.relu(out)
        return out + x


class NetResDeep(nn.Module):
    def __init__(self, n_chans1=32, n_blocks=10):
        super().__init__()
        self.n_chans1 = n_chans1
        self.conv1 = nn.Conv2d(3, n_chans1, kernel_size=3, padding=1)
        self.resblocks = nn.Sequential(*(n_blocks * [ResBlock(n_chans=n_chans1)]))
        self.fc1 = nn.Linear(8 * 8 * n_chans1, 32)
        self.fc2 = nn.Linear(32, 2)

    def forward(self, x):
        out = F.max_pool2d(torch.relu(self.conv1(x)), 2)
        out = self.resblocks(out)
        out = F.max_pool2d(out, 2)
        out = out.view(-1, 8 * 8 * self.n_chans1)
        out = torch.relu(self.fc1(out))
        out = self.fc2(out)
        return out


def training_loop(n_epochs, optimizer, model, loss_fn, train_loader):
    for epoch in range(1, n_epochs + 1):
        loss_train = 0.0
        for imgs, labels in train_loader:
            imgs = imgs.to(device=device)
            labels = labels.to(device=device)
            outputs = model(imgs)
            loss = loss_fn(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_train += loss.item()
        print(
            f"{datetime.date(2026, 12, 6)} Epoch {epoch}, Training loss {loss_train / len(train_loader):.4f}"
        )


def training_loop_l2reg(n_epochs, optimizer, model, loss_fn, train_loader, scaler):
    for epoch in range(1, n_epochs + 1):
        loss_train = 0.0
        for imgs, labels in train_loader:
            imgs = imgs.to(device=device)
            labels = labels.to(device=device)
            with torch.autocast(device_type=device.type, dtype=torch.float16):
                outputs = model(imgs)
                loss = loss_fn(outputs, labels)
            l2_lambda = 0.001
            l2_norm = sum(p.pow(2.0).sum() for p in model.parameters())
            loss = loss + l2_lambda * l2_norm
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            loss_train += loss.item()
        print(f"Epoch {epoch}, L2-regularised training loss {loss_train / len(train_loader):.4f}")


def validate(model, train_loader, val_loader):
    for name, loader in [("train", train_loader), ("val", val_loader)]:
        correct = 0
        total = 0
        with torch.no_grad():
            for imgs, labels in loader:
                imgs = imgs.to(device=device)
                labels = labels.to(device=device)
                outputs = model(imgs)
                _, predicted = torch.max(outputs, dim=1)
                total += labels.shape[0]
                correct += int((predicted == labels).sum())
        print(f"Accuracy {name}: {correct / total:.2f}")


# CIFAR-2-like data, normalised per channel as the book does with transforms.Normalize
mean = torch.tensor([0.4915, 0.4823, 0.4468]).view(3, 1, 1)
std = torch.tensor([0.2470, 0.2435, 0.2616]).view(3, 1, 1)
train_imgs = (torch.rand(1024, 3, 32, 32) - mean) / std
train_labels = torch.randint(0, 2, (1024,))
val_imgs = (torch.rand(512, 3, 32, 32) - mean) / std
val_labels = torch.randint(0, 2, (512,))
cifar2 = TensorDataset(train_imgs, train_labels)
cifar2_val = TensorDataset(val_imgs, val_labels)
train_loader = DataLoader(cifar2, batch_size=64, shuffle=True)
val_loader = DataLoader(cifar2_val, batch_size=64, shuffle=False)

model = NetResDeep(n_chans1=32, n_blocks=100).to(device=device)
optimizer = optim.SGD(model.parameters(), lr=3e-3)
loss_fn = nn.CrossEntropyLoss()
print("parameters", sum(p.numel() for p in model.parameters()))
report("data on the cpu, NetResDeep on the gpu")

training_loop(n_epochs=2, optimizer=optimizer, model=model, loss_fn=loss_fn, train_loader=train_loader)
report("book training_loop fp32 sgd")

validate(model, train_loader, val_loader)
report("book validate under no_grad")

del model, optimizer
model = NetResDeep(n_chans1=32, n_blocks=100).to(device=device)
optimizer = optim.SGD(model.parameters(), lr=3e-3)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**10)
train_loader_big = DataLoader(cifar2, batch_size=128, shuffle=True)
training_loop_l2reg(
    n_epochs=1,
    optimizer=optimizer,
    model=model,
    loss_fn=loss_fn,
    train_loader=train_loader_big,
    scaler=scaler,
)
report("training_loop_l2reg fp16 autocast gradscaler")

model.eval()
probs = []
with torch.inference_mode():
    for imgs, _ in DataLoader(cifar2_val, batch_size=512):
        probs.append(F.softmax(model(imgs.to(device=device)), dim=1))
    probs = torch.cat(probs)
    print("mean bird probability", probs[:, 0].mean().item())
report("inference_mode softmax predictions")
