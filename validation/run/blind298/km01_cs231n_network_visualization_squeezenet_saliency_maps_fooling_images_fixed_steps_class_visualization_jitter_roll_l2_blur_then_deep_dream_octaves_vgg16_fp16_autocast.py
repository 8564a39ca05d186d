"""CS231n's "network visualization" assignment, then Deep Dream, on torchvision models (random
weights, no downloads; the programs are the same with pretrained ones).

All the models are frozen (requires_grad_(False)); only images carry gradients.
Phases: (1) SqueezeNet 1.1 saliency maps: gradient of the correct-class scores with respect to a batch
of 32 images at 224x224, absolute value, max over channels; (2) fooling images: 10 images pushed
towards a target class by normalized gradient ascent on the image, 30 fixed steps each (the
assignment stops at success; here every image takes every step); (3) class visualization: a random
image optimized for a class score with L2 regularization, random jitter by torch.roll, clamping to
the normalized pixel range and a Gaussian blur every 10 steps (a depthwise conv2d by hand), 100
steps at 224x224; (4) Deep Dream on VGG16's features up to conv4_3: an image pyramid of 4 octaves
(bilinear interpolation) at batch 4, at each octave 12 ascent steps on the L2 norm of the
activations under fp16 autocast, the detail carried to the next octave. 4 phases."""

import math

import torch
import torch.nn.functional as F
import torchvision

torch.manual_seed(29801)
device = "cuda" if torch.cuda.is_available() else "cpu"
B_SAL, N_FOOL, FOOL_STEPS, CV_STEPS, DD_B, OCTAVES, DD_STEPS, DD_SIZE = 32, 10, 30, 100, 4, 4, 12, 512
MEAN = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def gaussian_kernel(sigma):
    radius = math.ceil(3 * sigma)
    x = torch.arange(-radius, radius + 1, dtype=torch.float32, device=device)
    k = torch.exp(-(x**2) / (2 * sigma**2))
    k = k / k.sum()
    return (k[:, None] * k[None, :]).expand(3, 1, -1, -1).contiguous(), radius


def blur(img, sigma=0.5):
    k, r = gaussian_kernel(sigma)
    return F.conv2d(F.pad(img, (r, r, r, r), mode="reflect"), k, groups=3)


model = torchvision.models.squeezenet1_1(weights=None).to(device).eval()
for p in model.parameters():
    p.requires_grad_(False)

# (1) saliency maps
X = ((torch.rand(B_SAL, 3, 224, 224, device=device) - MEAN) / STD).requires_grad_()
y = torch.randint(0, 1000, (B_SAL,), device=device)
scores = model(X)
scores.gather(1, y.view(-1, 1)).squeeze().sum().backward()
saliency = X.grad.abs().amax(dim=1)
print(f"saliency {tuple(saliency.shape)} mean {saliency.mean().item():.3e}")
del X, scores
report("saliency maps")

# (2) fooling images
fooled = []
for i in range(N_FOOL):
    X_fool = ((torch.rand(1, 3, 224, 224, device=device) - MEAN) / STD).requires_grad_()
    target = (i * 97) % 1000
    for _ in range(FOOL_STEPS):
        score = model(X_fool)[0, target]
        score.backward()
        with torch.no_grad():
            g = X_fool.grad
            X_fool += 1.0 * g / g.norm()
            X_fool.grad.zero_()
    fooled.append(X_fool.detach())
fooled = torch.cat(fooled)
hits = (model(fooled).argmax(1) == torch.arange(N_FOOL, device=device) * 97 % 1000).sum().item()
print(f"fooling images {tuple(fooled.shape)} hits {hits}")
report("fooling images")

# (3) class visualization
img = (torch.randn(1, 3, 224, 224, device=device) * 1.0).requires_grad_()
lo, hi = (-MEAN / STD), ((1.0 - MEAN) / STD)
for t in range(CV_STEPS):
    ox, oy = (t * 7) % 17 - 8, (t * 5) % 17 - 8
    with torch.no_grad():
        img.copy_(torch.roll(img, shifts=(ox, oy), dims=(2, 3)))
    score = model(img)[0, 76]
    obj = score - 1e-3 * img.pow(2).sum()
    obj.backward()
    with torch.no_grad():
        img += 25.0 * img.grad / img.grad.norm()
        img.grad.zero_()
        img.copy_(torch.roll(img, shifts=(-ox, -oy), dims=(2, 3)))
        img.copy_(torch.maximum(torch.minimum(img, hi), lo))
        if t % 10 == 0:
            img.copy_(blur(img))
print(f"class visualization score {model(img)[0, 76].item():.3f}")
del img
report("class visualization")

# (4) deep dream, octaves
del model
vgg = torchvision.models.vgg16(weights=None).features[:23].to(device).eval()
for p in vgg.parameters():
    p.requires_grad_(False)
base = (torch.rand(DD_B, 3, DD_SIZE, DD_SIZE, device=device) - MEAN) / STD
octaves = [base]
for _ in range(OCTAVES - 1):
    octaves.append(F.interpolate(octaves[-1], scale_factor=1 / 1.4, mode="bilinear", align_corners=False))
detail = torch.zeros_like(octaves[-1])
for n, oct_base in enumerate(reversed(octaves)):
    if n > 0:
        detail = F.interpolate(detail, size=oct_base.shape[-2:], mode="bilinear", align_corners=False)
    dream = (oct_base + detail).requires_grad_()
    for _ in range(DD_STEPS):
        with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
            act = vgg(dream)
            loss = act.float().pow(2).mean()
        (g,) = torch.autograd.grad(loss, dream)
        with torch.no_grad():
            dream += 0.01 * g / (g.abs().mean() + 1e-8)
    detail = (dream - oct_base).detach()
    print(f"octave {n} size {tuple(dream.shape[-2:])} loss {loss.item():.4f}")
result = (dream.detach() * STD + MEAN).clamp(0, 1)
print(f"deep dream {tuple(result.shape)}")
report("deep dream octaves")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
