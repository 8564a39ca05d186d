"""The pytorch.org "Training a classifier" tutorial as written, then the "Learning PyTorch with
examples" steps: CIFAR-10's 50,000 train and 10,000 test images replaced by seeded random tensors
of the same shapes, normalised and kept on the GPU, the tutorial's Net (Conv2d 3->6 and 6->16 of 5
x 5, MaxPool2d, Linear 400->120->84->10), CrossEntropyLoss, SGD (lr 0.001, momentum 0.9) at batch
4 for 300 mini-batches with the running loss read every 100, the test accuracy at batch 1,000 and
the per-class accuracy by `bincount`; then the third-order polynomial fit of sin(x) on 2,000 points
with tensors and hand-written gradients, with autograd and `no_grad` updates, with the custom
`LegendrePolynomial3` autograd Function, with nn.Sequential(Linear(3, 1), Flatten(0, 1)) and
manual updates, with RMSprop, and the DynamicNet that reuses its fourth weight 0 to 2 times by
`random.randint`; fp32; 6 phases."""

import math
import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14201)
random.seed(14201)
N_TRAIN, N_TEST = (64, 32) if SMALL else (50000, 10000)
STEPS, TEST_B = (8, 16) if SMALL else (300, 1000)
ITERS = 20 if SMALL else 500
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
classes = ("plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


def report(tag):
    if device.type == "cuda":
        print(f"{tag} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


# ToTensor() then Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)) on uint8 pixels, moved to the GPU once.
train_images = ((torch.randint(0, 256, (N_TRAIN, 3, 32, 32)).float() / 255 - 0.5) / 0.5).to(device)
train_labels = torch.randint(0, 10, (N_TRAIN,)).to(device)
test_images = ((torch.randint(0, 256, (N_TEST, 3, 32, 32)).float() / 255 - 0.5) / 0.5).to(device)
test_labels = torch.randint(0, 10, (N_TEST,)).to(device)
net = Net()
net.to(device)
criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
report("data")

order = torch.randperm(N_TRAIN, device=device)
running_loss = 0.0
for i in range(STEPS):
    idx = order[i * 4 : (i + 1) * 4]
    inputs, labels = train_images[idx], train_labels[idx]
    optimizer.zero_grad()
    outputs = net(inputs)
    loss = criterion(outputs, labels)
    loss.backward()
    optimizer.step()
    running_loss += loss.item()
    if i % 100 == 99:
        print(f"[1, {i + 1:5d}] loss: {running_loss / 100:.3f}")
        running_loss = 0.0
report("train")

correct, total = 0, 0
correct_pred = torch.zeros(10, dtype=torch.long, device=device)
total_pred = torch.zeros(10, dtype=torch.long, device=device)
with torch.no_grad():
    for start in range(0, N_TEST, TEST_B):
        images, labels = test_images[start : start + TEST_B], test_labels[start : start + TEST_B]
        outputs = net(images)
        _, predicted = torch.max(outputs, 1)
        total += labels.size(0)
        correct += (predicted == labels).sum().item()
        correct_pred += torch.bincount(labels[predicted == labels], minlength=10)
        total_pred += torch.bincount(labels, minlength=10)
print(f"Accuracy of the network on the 10000 test images: {100 * correct // total} %")
for name, c, t in zip(classes, correct_pred.tolist(), total_pred.tolist(), strict=True):
    print(f"Accuracy for class: {name:5s} is {100 * c / max(t, 1):.1f} %")
report("test")

# Learning PyTorch with examples: tensors, then autograd.
dtype = torch.float
x = torch.linspace(-math.pi, math.pi, 2000, device=device, dtype=dtype)
y = torch.sin(x)
a = torch.randn((), device=device, dtype=dtype)
b = torch.randn((), device=device, dtype=dtype)
c = torch.randn((), device=device, dtype=dtype)
d = torch.randn((), device=device, dtype=dtype)
learning_rate = 1e-6
for _t in range(ITERS):
    y_pred = a + b * x + c * x**2 + d * x**3
    loss = (y_pred - y).pow(2).sum().item()
    grad_y_pred = 2.0 * (y_pred - y)
    grad_a = grad_y_pred.sum()
    grad_b = (grad_y_pred * x).sum()
    grad_c = (grad_y_pred * x**2).sum()
    grad_d = (grad_y_pred * x**3).sum()
    a -= learning_rate * grad_a
    b -= learning_rate * grad_b
    c -= learning_rate * grad_c
    d -= learning_rate * grad_d
a, b, c, d = (torch.randn((), device=device, dtype=dtype, requires_grad=True) for _ in range(4))
for t in range(ITERS):
    y_pred = a + b * x + c * x**2 + d * x**3
    loss = (y_pred - y).pow(2).sum()
    if t % 100 == 99:
        print(t, loss.item())
    loss.backward()
    with torch.no_grad():
        for p in (a, b, c, d):
            p -= learning_rate * p.grad
            p.grad = None
report("tensors_autograd")


class LegendrePolynomial3(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return 0.5 * (5 * input**3 - 3 * input)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        return grad_output * 1.5 * (5 * input**2 - 1)


a = torch.full((), 0.0, device=device, dtype=dtype, requires_grad=True)
b = torch.full((), -1.0, device=device, dtype=dtype, requires_grad=True)
c = torch.full((), 0.0, device=device, dtype=dtype, requires_grad=True)
d = torch.full((), 0.3, device=device, dtype=dtype, requires_grad=True)
learning_rate = 5e-6
for _t in range(ITERS):
    P3 = LegendrePolynomial3.apply
    y_pred = a + b * P3(c + d * x)
    loss = (y_pred - y).pow(2).sum()
    loss.backward()
    with torch.no_grad():
        for p in (a, b, c, d):
            p -= learning_rate * p.grad
            p.grad = None

p = torch.tensor([1, 2, 3], device=device)
xx = x.unsqueeze(-1).pow(p)
model = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0, 1)).to(device)
loss_fn = torch.nn.MSELoss(reduction="sum")
learning_rate = 1e-6
for _t in range(ITERS):
    y_pred = model(xx)
    loss = loss_fn(y_pred, y)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for param in model.parameters():
            param -= learning_rate * param.grad
report("function_nn")

model = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0, 1)).to(device)
optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
for _t in range(ITERS):
    y_pred = model(xx)
    loss = loss_fn(y_pred, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


class DynamicNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(()))
        self.b = torch.nn.Parameter(torch.randn(()))
        self.c = torch.nn.Parameter(torch.randn(()))
        self.d = torch.nn.Parameter(torch.randn(()))
        self.e = torch.nn.Parameter(torch.randn(()))

    def forward(self, x):
        y = self.a + self.b * x + self.c * x**2 + self.d * x**3
        for exp in range(4, random.randint(4, 6)):
            y = y + self.e * x**exp
        return y


model = DynamicNet().to(device)
criterion = torch.nn.MSELoss(reduction="sum")
optimizer = torch.optim.SGD(model.parameters(), lr=1e-8, momentum=0.9)
for t in range(ITERS):
    y_pred = model(x)
    loss = criterion(y_pred, y)
    if t % 100 == 99:
        print(t, loss.item())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
report("optim_dynamic")
