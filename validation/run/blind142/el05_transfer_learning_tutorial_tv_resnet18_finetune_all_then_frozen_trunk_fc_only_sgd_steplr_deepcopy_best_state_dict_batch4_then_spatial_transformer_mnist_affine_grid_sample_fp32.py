"""Two pytorch.org vision tutorials as written: "transfer learning for computer vision" (the
hymenoptera set's 244 train and 153 val images of 224 x 224, seeded random tensors on the host moved
per batch of 4, the last val batch of 1; torchvision's resnet18 built without downloaded weights,
its fc replaced by Linear(512, 2); CrossEntropyLoss, SGD lr 0.001 momentum 0.9, StepLR(7, 0.1);
`train_model` with a train and a val pass per epoch under `set_grad_enabled`, the corrects summed
on the GPU and `copy.deepcopy(model.state_dict())` of the best epoch loaded back at the end), first
fine-tuning the whole network, then a fresh resnet18 as a fixed feature extractor with every
parameter frozen and only the new fc given to SGD; then "spatial transformer networks" on MNIST
(the localisation Conv2d/MaxPool2d/ReLU stack and its fc_loc regressing an identity-initialised
2 x 3 theta, `F.affine_grid` and `F.grid_sample`, then the classifier with Dropout2d and dropout,
`log_softmax`, nll_loss, SGD lr 0.01 at batch 64, 100 iterations), its test pass summing the
loss and corrects over 10,000 images, and the STN's warped batch under no_grad; fp32; 6 phases."""

import copy
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torchvision
from torch.optim import lr_scheduler

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14205)
torch.backends.cudnn.benchmark = False
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
dataset_sizes = {"train": 12, "val": 9} if SMALL else {"train": 244, "val": 153}
RES = 64 if SMALL else 224
STN_ITERS, N_TEST = (3, 128) if SMALL else (100, 10000)
class_names = ["ants", "bees"]


def report(tag):
    if device.type == "cuda":
        print(f"{tag} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def loader(phase, batch_size=4):
    n = dataset_sizes[phase]
    for start in range(0, n, batch_size):
        b = min(batch_size, n - start)
        images = torch.rand(b, 3, RES, RES)
        mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
        yield (images - mean) / std, torch.randint(0, 2, (b,))


def train_model(model, criterion, optimizer, scheduler, num_epochs=1):
    since = time.time()
    best_model_wts = copy.deepcopy(model.state_dict())
    best_acc = 0.0
    for _epoch in range(num_epochs):
        for phase in ["train", "val"]:
            if phase == "train":
                model.train()
            else:
                model.eval()
            running_loss = 0.0
            running_corrects = 0
            for inputs, labels in loader(phase):
                inputs = inputs.to(device)
                labels = labels.to(device)
                optimizer.zero_grad()
                with torch.set_grad_enabled(phase == "train"):
                    outputs = model(inputs)
                    _, preds = torch.max(outputs, 1)
                    loss = criterion(outputs, labels)
                    if phase == "train":
                        loss.backward()
                        optimizer.step()
                running_loss += loss.item() * inputs.size(0)
                running_corrects += torch.sum(preds == labels.data)
            if phase == "train":
                scheduler.step()
            epoch_loss = running_loss / dataset_sizes[phase]
            epoch_acc = running_corrects.double() / dataset_sizes[phase]
            print(f"{phase} Loss: {epoch_loss:.4f} Acc: {epoch_acc:.4f}")
            if phase == "val" and epoch_acc >= best_acc:
                best_acc = epoch_acc
                best_model_wts = copy.deepcopy(model.state_dict())
    print(f"Training complete in {time.time() - since:.0f}s, best val Acc: {float(best_acc):4f}")
    model.load_state_dict(best_model_wts)
    return model


model_ft = torchvision.models.resnet18(weights=None)
num_ftrs = model_ft.fc.in_features
model_ft.fc = nn.Linear(num_ftrs, 2)
model_ft = model_ft.to(device)
criterion = nn.CrossEntropyLoss()
optimizer_ft = optim.SGD(model_ft.parameters(), lr=0.001, momentum=0.9)
exp_lr_scheduler = lr_scheduler.StepLR(optimizer_ft, step_size=7, gamma=0.1)
report("resnet18")
model_ft = train_model(model_ft, criterion, optimizer_ft, exp_lr_scheduler)
report("finetune")

model_conv = torchvision.models.resnet18(weights=None)
for param in model_conv.parameters():
    param.requires_grad = False
num_ftrs = model_conv.fc.in_features
model_conv.fc = nn.Linear(num_ftrs, 2)
model_conv = model_conv.to(device)
optimizer_conv = optim.SGD(model_conv.fc.parameters(), lr=0.001, momentum=0.9)
exp_lr_scheduler = lr_scheduler.StepLR(optimizer_conv, step_size=7, gamma=0.1)
model_conv = train_model(model_conv, criterion, optimizer_conv, exp_lr_scheduler)
report("fixed_feature")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)
        self.localization = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=7),
            nn.MaxPool2d(2, stride=2),
            nn.ReLU(True),
            nn.Conv2d(8, 10, kernel_size=5),
            nn.MaxPool2d(2, stride=2),
            nn.ReLU(True),
        )
        self.fc_loc = nn.Sequential(nn.Linear(10 * 3 * 3, 32), nn.ReLU(True), nn.Linear(32, 3 * 2))
        self.fc_loc[2].weight.data.zero_()
        self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

    def stn(self, x):
        xs = self.localization(x)
        xs = xs.view(-1, 10 * 3 * 3)
        theta = self.fc_loc(xs)
        theta = theta.view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size())
        x = F.grid_sample(x, grid)
        return x

    def forward(self, x):
        x = self.stn(x)
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def mnist(n, batch_size=64):
    for start in range(0, n, batch_size):
        b = min(batch_size, n - start)
        yield (torch.rand(b, 1, 28, 28) - 0.1307) / 0.3081, torch.randint(0, 10, (b,))


model = Net().to(device)
optimizer = optim.SGD(model.parameters(), lr=0.01)
model.train()
for batch_idx, (data, target) in enumerate(mnist(STN_ITERS * 64)):
    data, target = data.to(device), target.to(device)
    optimizer.zero_grad()
    output = model(data)
    loss = F.nll_loss(output, target)
    loss.backward()
    optimizer.step()
    if batch_idx % 50 == 0:
        print(f"Train Epoch: 1 [{batch_idx * len(data)}]\tLoss: {loss.item():.6f}")
report("stn_train")

with torch.no_grad():
    model.eval()
    test_loss = 0
    correct = 0
    for data, target in mnist(N_TEST):
        data, target = data.to(device), target.to(device)
        output = model(data)
        test_loss += F.nll_loss(output, target, reduction="sum").item()
        pred = output.max(1, keepdim=True)[1]
        correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= N_TEST
    print(f"Test set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{N_TEST}")
report("stn_test")

with torch.no_grad():
    data = next(iter(mnist(64)))[0].to(device)
    input_tensor = data.cpu()
    transformed_input_tensor = model.stn(data).cpu()
print(f"warped {tuple(transformed_input_tensor.shape)}")
report("stn_visualize")
