"""Dive into Deep Learning (d2l.ai), the "from scratch" chapters as their readers type them, on
Fashion-MNIST-shaped synthetic data (batches of 1x28x28 images, 10 classes).

Phases: (1) softmax regression and a 2-hidden-layer MLP from scratch: parameters made with
torch.normal(...) and requires_grad=True, softmax as exp / sum, ReLU as torch.max(X, zeros_like),
cross-entropy by fancy indexing y_hat[range(n), y], d2l's `sgd(params, lr, batch_size)` updating
under no_grad and zeroing each grad, dropout from scratch with a Bernoulli mask; (2) LeNet with
batch normalization from scratch (d2l's `batch_norm` function: batch statistics in training,
moving mean/variance updated by momentum, kept as plain tensors moved with the module), 30 steps at
batch 256 with SGD; (3) d2l's DenseNet (conv blocks of BN-ReLU-conv, dense blocks concatenating
with torch.cat, transition blocks with 1x1 conv and average pooling) on images resized to 96x96 by
F.interpolate, batch 256, fp16 autocast with GradScaler and SGD, 8 steps; (4) evaluation in
eval mode under no_grad over 8 batches of 512 with accuracy counted by argmax. 4 phases."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(29802)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def batch(n, size=28):
    X = torch.rand(n, 1, size, size, device=device)
    y = torch.randint(0, 10, (n,), device=device)
    return X, y


# (1) softmax regression and MLP from scratch
def softmax(X):
    X_exp = torch.exp(X)
    partition = X_exp.sum(1, keepdim=True)
    return X_exp / partition


def cross_entropy(y_hat, y):
    return -torch.log(y_hat[range(len(y_hat)), y])


def relu(X):
    a = torch.zeros_like(X)
    return torch.max(X, a)


def dropout_layer(X, p):
    mask = (torch.rand(X.shape, device=X.device) > p).float()
    return mask * X / (1.0 - p)


def sgd(params, lr, batch_size):
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()


W = torch.normal(0, 0.01, size=(784, 10), device=device, requires_grad=True)
b = torch.zeros(10, device=device, requires_grad=True)
for _ in range(20):
    X, y = batch(256)
    y_hat = softmax(X.reshape((-1, W.shape[0])) @ W + b)
    cross_entropy(y_hat, y).sum().backward()
    sgd([W, b], 0.1, 256)
W1 = torch.normal(0, 0.01, size=(784, 256), device=device, requires_grad=True)
b1 = torch.zeros(256, device=device, requires_grad=True)
W2 = torch.normal(0, 0.01, size=(256, 256), device=device, requires_grad=True)
b2 = torch.zeros(256, device=device, requires_grad=True)
W3 = torch.normal(0, 0.01, size=(256, 10), device=device, requires_grad=True)
b3 = torch.zeros(10, device=device, requires_grad=True)
params = [W1, b1, W2, b2, W3, b3]
for _ in range(20):
    X, y = batch(256)
    H1 = dropout_layer(relu(X.reshape((-1, 784)) @ W1 + b1), 0.2)
    H2 = dropout_layer(relu(H1 @ W2 + b2), 0.5)
    loss = F.cross_entropy(H2 @ W3 + b3, y, reduction="none")
    loss.sum().backward()
    sgd(params, 0.1, 256)
print(f"from scratch loss {loss.mean().item():.4f}")
report("softmax and mlp from scratch")


# (2) LeNet with batch norm from scratch
def batch_norm(X, gamma, beta, moving_mean, moving_var, eps, momentum):
    if not torch.is_grad_enabled():
        X_hat = (X - moving_mean) / torch.sqrt(moving_var + eps)
    else:
        assert len(X.shape) in (2, 4)
        if len(X.shape) == 2:
            mean = X.mean(dim=0)
            var = ((X - mean) ** 2).mean(dim=0)
        else:
            mean = X.mean(dim=(0, 2, 3), keepdim=True)
            var = ((X - mean) ** 2).mean(dim=(0, 2, 3), keepdim=True)
        X_hat = (X - mean) / torch.sqrt(var + eps)
        moving_mean = (1.0 - momentum) * moving_mean + momentum * mean
        moving_var = (1.0 - momentum) * moving_var + momentum * var
    Y = gamma * X_hat + beta
    return Y, moving_mean.data, moving_var.data


class BatchNorm(nn.Module):
    def __init__(self, num_features, num_dims):
        super().__init__()
        shape = (1, num_features) if num_dims == 2 else (1, num_features, 1, 1)
        self.gamma = nn.Parameter(torch.ones(shape))
        self.beta = nn.Parameter(torch.zeros(shape))
        self.moving_mean = torch.zeros(shape)
        self.moving_var = torch.ones(shape)

    def forward(self, X):
        if self.moving_mean.device != X.device:
            self.moving_mean = self.moving_mean.to(X.device)
            self.moving_var = self.moving_var.to(X.device)
        Y, self.moving_mean, self.moving_var = batch_norm(
            X, self.gamma, self.beta, self.moving_mean, self.moving_var, eps=1e-5, momentum=0.1
        )
        return Y


lenet = nn.Sequential(
    nn.Conv2d(1, 6, kernel_size=5), BatchNorm(6, num_dims=4), nn.Sigmoid(),
    nn.AvgPool2d(kernel_size=2, stride=2),
    nn.Conv2d(6, 16, kernel_size=5), BatchNorm(16, num_dims=4), nn.Sigmoid(),
    nn.AvgPool2d(kernel_size=2, stride=2), nn.Flatten(),
    nn.Linear(16 * 4 * 4, 120), BatchNorm(120, num_dims=2), nn.Sigmoid(),
    nn.Linear(120, 84), BatchNorm(84, num_dims=2), nn.Sigmoid(),
    nn.Linear(84, 10),
).to(device)  # fmt: skip
opt = torch.optim.SGD(lenet.parameters(), lr=0.9)
for _ in range(30):
    X, y = batch(256)
    opt.zero_grad()
    loss = F.cross_entropy(lenet(X), y)
    loss.backward()
    opt.step()
print(f"lenet bn loss {loss.item():.4f}")
del opt
report("lenet batch norm from scratch")


# (3) DenseNet
def conv_block(input_channels, num_channels):
    return nn.Sequential(
        nn.BatchNorm2d(input_channels),
        nn.ReLU(),
        nn.Conv2d(input_channels, num_channels, kernel_size=3, padding=1),
    )


class DenseBlock(nn.Module):
    def __init__(self, num_convs, input_channels, num_channels):
        super().__init__()
        layer = []
        for i in range(num_convs):
            layer.append(conv_block(num_channels * i + input_channels, num_channels))
        self.net = nn.Sequential(*layer)

    def forward(self, X):
        for blk in self.net:
            Y = blk(X)
            X = torch.cat((X, Y), dim=1)
        return X


def transition_block(input_channels, num_channels):
    return nn.Sequential(
        nn.BatchNorm2d(input_channels),
        nn.ReLU(),
        nn.Conv2d(input_channels, num_channels, kernel_size=1),
        nn.AvgPool2d(kernel_size=2, stride=2),
    )


b1_ = nn.Sequential(
    nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3),
    nn.BatchNorm2d(64),
    nn.ReLU(),
    nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
)
num_channels, growth_rate = 64, 32
num_convs_in_dense_blocks = [4, 4, 4, 4]
blks = []
for i, num_convs in enumerate(num_convs_in_dense_blocks):
    blks.append(DenseBlock(num_convs, num_channels, growth_rate))
    num_channels += num_convs * growth_rate
    if i != len(num_convs_in_dense_blocks) - 1:
        blks.append(transition_block(num_channels, num_channels // 2))
        num_channels = num_channels // 2
net = nn.Sequential(
    b1_, *blks, nn.BatchNorm2d(num_channels), nn.ReLU(), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(),
    nn.Linear(num_channels, 10),
).to(device)  # fmt: skip


def init_cnn(module):
    if type(module) in (nn.Linear, nn.Conv2d):
        nn.init.xavier_uniform_(module.weight)


net.apply(init_cnn)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
for _ in range(8):
    X, y = batch(256)
    X = F.interpolate(X, size=(96, 96), mode="bilinear", align_corners=False)
    opt.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        loss = F.cross_entropy(net(X), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
print(f"densenet loss {loss.item():.4f}")
report("densenet fp16 gradscaler")

# (4) evaluation
net.eval()
correct, total = 0, 0
with torch.no_grad():
    for _ in range(8):
        X, y = batch(512)
        X = F.interpolate(X, size=(96, 96), mode="bilinear", align_corners=False)
        y_hat = net(X)
        correct += (y_hat.argmax(axis=1).type(y.dtype) == y).float().sum().item()
        total += y.numel()
print(f"eval accuracy {correct / total:.4f}")
report("densenet eval")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
