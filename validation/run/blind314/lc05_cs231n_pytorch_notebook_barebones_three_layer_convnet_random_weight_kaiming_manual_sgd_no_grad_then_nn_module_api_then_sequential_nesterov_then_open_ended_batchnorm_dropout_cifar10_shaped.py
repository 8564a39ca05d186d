"""The CS231n assignment 2 PyTorch notebook as a student writes it, on CIFAR-10-shaped random batches (3 x 32
x 32, 10 classes; the data set is not loaded). Part II "barebones PyTorch": weights made by random_weight
(Kaiming-normal, requires_grad) and zero_weight, a three_layer_convnet function of F.conv2d (5x5 pad 2 ->
ReLU -> 3x3 pad 1 -> ReLU -> flatten -> fully connected), trained with manual SGD updates under
torch.no_grad (w -= lr * w.grad; w.grad.zero_()). Part III "Module API": a ThreeLayerConvNet nn.Module with
nn.init.kaiming_normal_ trained with optim.SGD(nesterov=True, momentum 0.9). Part IV "Sequential API":
the same net as nn.Sequential with a Flatten module. Part V "open-ended": a deeper VGG-like net with
BatchNorm2d, max pooling and Dropout, Adam, and check_accuracy under torch.no_grad in eval mode.
All fp32, batch 256.

Phases: 0 barebones training; 1 Module API; 2 Sequential API; 3 open-ended training; 4 check_accuracy."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

torch.manual_seed(231)
device = torch.device("cuda")
dtype = torch.float32
N, STEPS = 256, 10


def batches(steps):
    for _ in range(steps):
        yield torch.randn(N, 3, 32, 32), torch.randint(0, 10, (N,))


def flatten(x):
    return x.view(x.shape[0], -1)


def random_weight(shape):
    fan_in = shape[1] if len(shape) == 2 else shape[1] * shape[2] * shape[3]
    w = torch.randn(shape, device=device, dtype=dtype) * (2.0 / fan_in) ** 0.5
    w.requires_grad = True
    return w


def zero_weight(shape):
    return torch.zeros(shape, device=device, dtype=dtype, requires_grad=True)


def three_layer_convnet(x, params):
    conv_w1, conv_b1, conv_w2, conv_b2, fc_w, fc_b = params
    x = F.relu(F.conv2d(x, conv_w1, conv_b1, padding=2))
    x = F.relu(F.conv2d(x, conv_w2, conv_b2, padding=1))
    return flatten(x).mm(fc_w) + fc_b


params = [
    random_weight((32, 3, 5, 5)),
    zero_weight((32,)),
    random_weight((16, 32, 3, 3)),
    zero_weight((16,)),
    random_weight((16 * 32 * 32, 10)),
    zero_weight((10,)),
]
learning_rate = 3e-3
for t, (x, y) in enumerate(batches(STEPS)):
    x, y = x.to(device=device, dtype=dtype), y.to(device=device, dtype=torch.long)
    scores = three_layer_convnet(x, params)
    loss = F.cross_entropy(scores, y)
    loss.backward()
    with torch.no_grad():
        for w in params:
            w -= learning_rate * w.grad
            w.grad.zero_()
    if t % 5 == 0:
        print(f"barebones iteration {t}, loss = {loss.item():.4f}")
del params, scores, loss
torch.cuda.reset_peak_memory_stats()


class ThreeLayerConvNet(nn.Module):
    def __init__(self, in_channel, channel_1, channel_2, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channel, channel_1, 5, padding=2)
        self.conv2 = nn.Conv2d(channel_1, channel_2, 3, padding=1)
        self.fc = nn.Linear(channel_2 * 32 * 32, num_classes)
        nn.init.kaiming_normal_(self.conv1.weight)
        nn.init.kaiming_normal_(self.conv2.weight)
        nn.init.kaiming_normal_(self.fc.weight)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.fc(flatten(x))


def train_part34(model, optimizer, steps):
    model = model.to(device=device)
    for t, (x, y) in enumerate(batches(steps)):
        model.train()
        x, y = x.to(device=device, dtype=dtype), y.to(device=device, dtype=torch.long)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if t % 5 == 0:
            print(f"iteration {t}, loss = {loss.item():.4f}")


model = ThreeLayerConvNet(3, 32, 16, 10)
optimizer = optim.SGD(model.parameters(), lr=3e-3, momentum=0.9, nesterov=True)
train_part34(model, optimizer, STEPS)
del model, optimizer
torch.cuda.reset_peak_memory_stats()

model = nn.Sequential(
    nn.Conv2d(3, 32, 5, padding=2),
    nn.ReLU(),
    nn.Conv2d(32, 16, 3, padding=1),
    nn.ReLU(),
    nn.Flatten(),
    nn.Linear(16 * 32 * 32, 10),
)
optimizer = optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, nesterov=True)
train_part34(model, optimizer, STEPS)
del model, optimizer
torch.cuda.reset_peak_memory_stats()


def block(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]


model = nn.Sequential(
    *block(3, 64),
    *block(64, 64),
    nn.MaxPool2d(2),
    *block(64, 128),
    *block(128, 128),
    nn.MaxPool2d(2),
    *block(128, 256),
    *block(256, 256),
    nn.MaxPool2d(2),
    nn.Flatten(),
    nn.Dropout(0.5),
    nn.Linear(256 * 4 * 4, 512),
    nn.ReLU(),
    nn.Dropout(0.5),
    nn.Linear(512, 10),
)
optimizer = optim.Adam(model.parameters(), lr=1e-3)
train_part34(model, optimizer, STEPS)
torch.cuda.reset_peak_memory_stats()


def check_accuracy(model, steps):
    num_correct = num_samples = 0
    model.eval()
    with torch.no_grad():
        for x, y in batches(steps):
            x, y = x.to(device=device, dtype=dtype), y.to(device=device, dtype=torch.long)
            preds = model(x).max(1)[1]
            num_correct += (preds == y).sum()
            num_samples += preds.size(0)
    acc = float(num_correct) / num_samples
    print(f"Got {int(num_correct)} / {num_samples} correct ({100 * acc:.2f})")


check_accuracy(model, 4)
torch.cuda.reset_peak_memory_stats()
