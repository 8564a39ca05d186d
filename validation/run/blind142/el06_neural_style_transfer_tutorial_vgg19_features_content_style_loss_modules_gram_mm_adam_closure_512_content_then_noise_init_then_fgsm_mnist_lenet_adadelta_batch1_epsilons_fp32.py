"""Two pytorch.org tutorials as written: "neural transfer using PyTorch" at 512 x 512 under its
`torch.set_default_device(device)` (the style and content images seeded random tensors in [0, 1] of
the same shape; torchvision's vgg19 features built without downloaded weights, in eval mode; the
Normalization module, ContentLoss after conv_4 and StyleLoss after conv_1 to conv_5 as transparent
modules whose targets (the content feature and the style Gram matrices by `mm`) are taken while the
model is assembled, the Sequential trimmed after the last loss, `requires_grad_(False)` on the model
and the input image optimised through a closure that clamps it under no_grad, style weight 1e6, 60
steps, with Adam (lr 0.02) in place of L-BFGS, whose stopping tests read values), first from the
content image, then from white noise as the tutorial suggests; then "adversarial example generation"
(FGSM): the MNIST LeNet of pytorch/examples (Conv2d 1->32->64 of 3 x 3, dropout, Linear
9216->128->10, `log_softmax`) trained 40 steps at batch 64 by Adadelta (lr 1.0), then attacked at
batch 1 over 200 test images for each epsilon of 0 to 0.3 (the input's gradient, `sign`,
denormalise, clamp, `transforms.Normalize`, classify again), every image attacked where the tutorial
skips those misclassified already; fp32; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torchvision import transforms
from torchvision.models import vgg19

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14206)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.set_default_device(device)
imsize = 64 if SMALL else 512
NUM_STEPS, MNIST_STEPS, N_ATTACK = (3, 2, 4) if SMALL else (60, 40, 200)


def report(tag):
    if device.type == "cuda":
        print(f"{tag} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def image_loader(seed):
    g = torch.Generator().manual_seed(seed)
    image = torch.rand(3, imsize, imsize, generator=g, device="cpu")
    image = image.unsqueeze(0)
    return image.to(device, torch.float)


style_img = image_loader(1)
content_img = image_loader(2)


class ContentLoss(nn.Module):
    def __init__(self, target):
        super().__init__()
        self.target = target.detach()

    def forward(self, input):
        self.loss = F.mse_loss(input, self.target)
        return input


def gram_matrix(input):
    a, b, c, d = input.size()
    features = input.view(a * b, c * d)
    G = torch.mm(features, features.t())
    return G.div(a * b * c * d)


class StyleLoss(nn.Module):
    def __init__(self, target_feature):
        super().__init__()
        self.target = gram_matrix(target_feature).detach()

    def forward(self, input):
        G = gram_matrix(input)
        self.loss = F.mse_loss(G, self.target)
        return input


cnn = vgg19(weights=None).features.eval()
cnn_normalization_mean = torch.tensor([0.485, 0.456, 0.406])
cnn_normalization_std = torch.tensor([0.229, 0.224, 0.225])


class Normalization(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def forward(self, img):
        return (img - self.mean) / self.std


content_layers_default = ["conv_4"]
style_layers_default = ["conv_1", "conv_2", "conv_3", "conv_4", "conv_5"]


def get_style_model_and_losses(
    cnn,
    normalization_mean,
    normalization_std,
    style_img,
    content_img,
    content_layers=content_layers_default,
    style_layers=style_layers_default,
):
    normalization = Normalization(normalization_mean, normalization_std)
    content_losses = []
    style_losses = []
    model = nn.Sequential(normalization)
    i = 0
    for layer in cnn.children():
        if isinstance(layer, nn.Conv2d):
            i += 1
            name = f"conv_{i}"
        elif isinstance(layer, nn.ReLU):
            name = f"relu_{i}"
            layer = nn.ReLU(inplace=False)
        elif isinstance(layer, nn.MaxPool2d):
            name = f"pool_{i}"
        elif isinstance(layer, nn.BatchNorm2d):
            name = f"bn_{i}"
        else:
            raise RuntimeError(f"Unrecognized layer: {layer.__class__.__name__}")
        model.add_module(name, layer)
        if name in content_layers:
            target = model(content_img).detach()
            content_loss = ContentLoss(target)
            model.add_module(f"content_loss_{i}", content_loss)
            content_losses.append(content_loss)
        if name in style_layers:
            target_feature = model(style_img).detach()
            style_loss = StyleLoss(target_feature)
            model.add_module(f"style_loss_{i}", style_loss)
            style_losses.append(style_loss)
    for i in range(len(model) - 1, -1, -1):
        if isinstance(model[i], ContentLoss) or isinstance(model[i], StyleLoss):
            break
    model = model[: (i + 1)]
    return model, style_losses, content_losses


def get_input_optimizer(input_img):
    return optim.Adam([input_img], lr=0.02)


def run_style_transfer(
    cnn,
    normalization_mean,
    normalization_std,
    content_img,
    style_img,
    input_img,
    num_steps=300,
    style_weight=1000000,
    content_weight=1,
):
    model, style_losses, content_losses = get_style_model_and_losses(
        cnn, normalization_mean, normalization_std, style_img, content_img
    )
    input_img.requires_grad_(True)
    model.eval()
    model.requires_grad_(False)
    optimizer = get_input_optimizer(input_img)
    run = [0]
    while run[0] <= num_steps:

        def closure():
            with torch.no_grad():
                input_img.clamp_(0, 1)
            optimizer.zero_grad()
            model(input_img)
            style_score = 0
            content_score = 0
            for sl in style_losses:
                style_score += sl.loss
            for cl in content_losses:
                content_score += cl.loss
            style_score *= style_weight
            content_score *= content_weight
            loss = style_score + content_score
            loss.backward()
            run[0] += 1
            return style_score + content_score

        optimizer.step(closure)
    with torch.no_grad():
        input_img.clamp_(0, 1)
    return input_img


report("images_vgg19")
input_img = content_img.clone()
output = run_style_transfer(
    cnn, cnn_normalization_mean, cnn_normalization_std, content_img, style_img, input_img, num_steps=NUM_STEPS
)
print(f"stylised {tuple(output.shape)}")
report("style_from_content")

input_img = torch.randn(content_img.data.size())
output = run_style_transfer(
    cnn, cnn_normalization_mean, cnn_normalization_std, content_img, style_img, input_img, num_steps=NUM_STEPS
)
print(f"stylised from noise {tuple(output.shape)}")
del output, input_img
report("style_from_noise")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
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


def mnist(n, batch_size):
    for _ in range(n):
        images = torch.rand(batch_size, 1, 28, 28, device="cpu")
        yield (images - 0.1307) / 0.3081, torch.randint(0, 10, (batch_size,), device="cpu")


model = Net().to(device)
optimizer = optim.Adadelta(model.parameters(), lr=1.0)
model.train()
for data, target in mnist(MNIST_STEPS, 64):
    data, target = data.to(device), target.to(device)
    optimizer.zero_grad()
    output = model(data)
    loss = F.nll_loss(output, target)
    loss.backward()
    optimizer.step()
print(f"mnist loss {loss.item():.4f}")
report("mnist_train")
model.eval()


def fgsm_attack(image, epsilon, data_grad):
    sign_data_grad = data_grad.sign()
    perturbed_image = image + epsilon * sign_data_grad
    perturbed_image = torch.clamp(perturbed_image, 0, 1)
    return perturbed_image


def denorm(batch, mean=[0.1307], std=[0.3081]):  # noqa: B006
    if isinstance(mean, list):
        mean = torch.tensor(mean).to(device)
    if isinstance(std, list):
        std = torch.tensor(std).to(device)
    return batch * std.view(1, -1, 1, 1) + mean.view(1, -1, 1, 1)


def test(model, device, test_loader, epsilon):
    correct = 0
    adv_examples = []
    for data, target in test_loader:
        data, target = data.to(device), target.to(device)
        data.requires_grad = True
        output = model(data)
        init_pred = output.max(1, keepdim=True)[1]
        loss = F.nll_loss(output, target)
        model.zero_grad()
        loss.backward()
        data_grad = data.grad.data
        data_denorm = denorm(data)
        perturbed_data = fgsm_attack(data_denorm, epsilon, data_grad)
        perturbed_data_normalized = transforms.Normalize((0.1307,), (0.3081,))(perturbed_data)
        output = model(perturbed_data_normalized)
        final_pred = output.max(1, keepdim=True)[1]
        if final_pred.item() == target.item():
            correct += 1
        if len(adv_examples) < 5:
            adv_ex = perturbed_data.squeeze().detach().cpu().numpy()
            adv_examples.append((init_pred.item(), final_pred.item(), adv_ex))
    final_acc = correct / float(N_ATTACK)
    print(f"Epsilon: {epsilon}\tTest Accuracy = {correct} / {N_ATTACK} = {final_acc}")
    return final_acc, adv_examples


epsilons = [0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3]
accuracies, examples = [], []
for eps in epsilons:
    acc, ex = test(model, device, mnist(N_ATTACK, 1), eps)
    accuracies.append(acc)
    examples.append(ex)
    if eps == 0:
        report("fgsm_eps0")
report("fgsm")
