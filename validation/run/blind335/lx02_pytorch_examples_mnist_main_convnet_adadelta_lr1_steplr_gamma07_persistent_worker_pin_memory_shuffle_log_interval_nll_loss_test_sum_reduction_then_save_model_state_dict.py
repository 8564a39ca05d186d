"""pytorch/examples mnist/main.py (commit 77f55b9) re-created with its structure kept: argparse with the original
defaults, Net (conv 1->32->64 3x3, max_pool2d, dropout 0.25/0.5, fc 9216->128->10, log_softmax), train() with its
log-interval prints and `--dry-run` break, test() summing nll_loss(reduction='sum').item() and argmax accuracy
under no_grad, Adadelta(lr=1.0) + StepLR(step_size=1, gamma=0.7), the accelerator's DataLoader kwargs
(num_workers=1, persistent_workers=True, pin_memory=True, shuffle=True, for both loaders), data moved with
.to(device), and `--save-model` torch.save(model.state_dict(), "mnist_cnn.pt") (into a temporary directory).
Only the data is replaced: an MNIST-like map-style dataset (uint8 28x28 images handed out as PIL 'L' images
as torchvision's MNIST does, then ToTensor + Normalize((0.1307,), (0.3081,))), 1280 training and 2000 test
images drawn once from a seeded generator (the original has 60000/10000).

Run as `main.py --epochs 3 --save-model`. Phases: epoch 1 training (20 steps of batch 64); epoch 1 test (2
batches of 1000); epoch 2 training + test; epoch 3 training + test + save."""

import argparse
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from PIL import Image
from torch.optim.lr_scheduler import StepLR
from torchvision import transforms


class SyntheticMNIST(torch.utils.data.Dataset):
    """Stands in for datasets.MNIST: same item types, same transform path."""

    def __init__(self, root, train=True, download=False, transform=None):
        n = 1280 if train else 2000
        g = torch.Generator().manual_seed(0 if train else 1)
        self.data = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
        self.targets = torch.randint(0, 10, (n,), generator=g)
        self.transform = transform

    def __getitem__(self, index):
        img, target = self.data[index], int(self.targets[index])
        img = Image.fromarray(img.numpy(), mode="L")
        if self.transform is not None:
            img = self.transform(img)
        return img, target

    def __len__(self):
        return len(self.data)


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def report(tag):
    print(f"[{tag}] peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))
            if args.dry_run:
                break


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)

    print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'.format(
        test_loss, correct, len(test_loader.dataset),
        100. * correct / len(test_loader.dataset)))


def main(argv=None):
    # Training settings
    parser = argparse.ArgumentParser(description='PyTorch MNIST Example')
    parser.add_argument('--batch-size', type=int, default=64, metavar='N',
                        help='input batch size for training (default: 64)')
    parser.add_argument('--test-batch-size', type=int, default=1000, metavar='N',
                        help='input batch size for testing (default: 1000)')
    parser.add_argument('--epochs', type=int, default=14, metavar='N',
                        help='number of epochs to train (default: 14)')
    parser.add_argument('--lr', type=float, default=1.0, metavar='LR',
                        help='learning rate (default: 1.0)')
    parser.add_argument('--gamma', type=float, default=0.7, metavar='M',
                        help='Learning rate step gamma (default: 0.7)')
    parser.add_argument('--no-accel', action='store_true',
                        help='disables accelerator')
    parser.add_argument('--dry-run', action='store_true',
                        help='quickly check a single pass')
    parser.add_argument('--seed', type=int, default=1, metavar='S',
                        help='random seed (default: 1)')
    parser.add_argument('--log-interval', type=int, default=10, metavar='N',
                        help='how many batches to wait before logging training status')
    parser.add_argument('--save-model', action='store_true',
                        help='For Saving the current Model')
    args = parser.parse_args(argv)

    use_accel = not args.no_accel and torch.accelerator.is_available()

    torch.manual_seed(args.seed)

    if use_accel:
        device = torch.accelerator.current_accelerator()
    else:
        device = torch.device("cpu")

    train_kwargs = {'batch_size': args.batch_size}
    test_kwargs = {'batch_size': args.test_batch_size}
    if use_accel:
        accel_kwargs = {'num_workers': 1,
                        'persistent_workers': True,
                        'pin_memory': True,
                        'shuffle': True}
        train_kwargs.update(accel_kwargs)
        test_kwargs.update(accel_kwargs)

    transform = transforms.Compose([
        transforms.ToTensor(),
        transforms.Normalize((0.1307,), (0.3081,))
    ])
    dataset1 = SyntheticMNIST('../data', train=True, download=True,
                              transform=transform)
    dataset2 = SyntheticMNIST('../data', train=False,
                              transform=transform)
    train_loader = torch.utils.data.DataLoader(dataset1, **train_kwargs)
    test_loader = torch.utils.data.DataLoader(dataset2, **test_kwargs)

    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        if epoch == 1:
            report("epoch 1 train")
        test(model, device, test_loader)
        scheduler.step()
        if epoch < args.epochs:
            report(f"epoch {epoch} test" if epoch == 1 else f"epoch {epoch} train + test")

    if args.save_model:
        torch.save(model.state_dict(), "mnist_cnn.pt")
        print("saved", os.path.getsize("mnist_cnn.pt"), "bytes;", np.round(scheduler.get_last_lr()[0], 4))
    report(f"epoch {args.epochs} train + test + save")


if __name__ == '__main__':
    with tempfile.TemporaryDirectory() as workdir:
        os.chdir(workdir)
        main(["--epochs", "3", "--save-model"])
