"""Gatys et al. neural style transfer optimising the image itself, as the classic PyTorch recipes do,
on a frozen torchvision VGG19 (`weights=None`, random seeded weights: the program is the point, not the
picture). The features are read by `register_forward_hook`s on relu1_1 .. relu5_1 and relu4_2 of
`vgg.features` truncated after the last layer needed (`features[:30]`), every parameter
`requires_grad_(False)`, the model in eval mode. Style targets: Gram matrices `torch.bmm(f, f^T) / (c*h*w)`
of the style image's features, computed once under `no_grad`; content target relu4_2 detached.
Phase 1: 256 x 256, the content image cloned into an `nn.Parameter`, `torch.optim.LBFGS(lr=1,
history_size=100, max_iter=20)` stepped 3 times with a closure (zero_grad, clamp in `no_grad`, style MSE over
five Grams + content MSE + total variation, backward, return the loss): LBFGS keeps its old_dirs/old_stps
history on the device. Phase 2: coarse-to-fine, the result bilinearly `F.interpolate`d to 512 x 512, a fresh
parameter and a fresh LBFGS (`line_search_fn="strong_wolfe"`, max_iter=10) for 2 steps; the old optimizer
deleted. Phase 3: a batch of 4 content images against 4 styles at 384 x 384 under bf16 autocast, the images a
leaf tensor optimised with Adam (lr 0.02) for 6 steps (the Grams in fp32 via `.float()`).
Phase 4: `inference_mode` feature statistics of the 4 stylised images (Grams and per-layer means) in bf16.
4 phases."""

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

torch.manual_seed(2971)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


STYLE_LAYERS = {1: "relu1_1", 6: "relu2_1", 11: "relu3_1", 20: "relu4_1", 29: "relu5_1"}
CONTENT_LAYER = {22: "relu4_2"}

vgg = torchvision.models.vgg19(weights=None).features[:30].to(dev).eval()
vgg.requires_grad_(False)
feats = {}


def hook(name):
    def fn(_module, _inp, out):
        feats[name] = out

    return fn


for idx, name in {**STYLE_LAYERS, **CONTENT_LAYER}.items():
    vgg[idx].register_forward_hook(hook(name))

mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1)


def extract(img):
    feats.clear()
    vgg((img - mean) / std)
    return dict(feats)


def gram(f):
    b, c, h, w = f.shape
    f = f.reshape(b, c, h * w)
    return torch.bmm(f, f.transpose(1, 2)) / (c * h * w)


def tv(img):
    return (img[..., 1:, :] - img[..., :-1, :]).abs().mean() + (
        img[..., :, 1:] - img[..., :, :-1]
    ).abs().mean()


def targets(content, style):
    with torch.no_grad():
        fs = extract(style)
        grams = {n: gram(fs[n]) for n in STYLE_LAYERS.values()}
        content_t = extract(content)["relu4_2"].detach()
    return grams, content_t


def loss_fn(img, grams, content_t, style_w=1e5, tv_w=1e-3):
    f = extract(img)
    style = sum(F.mse_loss(gram(f[n]), grams[n]) for n in STYLE_LAYERS.values())
    content = F.mse_loss(f["relu4_2"], content_t)
    return style_w * style + content + tv_w * tv(img)


content = torch.rand(1, 3, 256, 256, device=dev)
style = torch.rand(1, 3, 256, 256, device=dev)
grams, content_t = targets(content, style)
img = nn.Parameter(content.clone())
opt = torch.optim.LBFGS([img], lr=1.0, max_iter=20, history_size=100)


def closure():
    opt.zero_grad()
    with torch.no_grad():
        img.clamp_(0, 1)
    loss = loss_fn(img, grams, content_t)
    loss.backward()
    return loss


for _ in range(3):
    loss = opt.step(closure)
print("lbfgs 256 loss", round(float(loss), 4), "history", len(opt.state[img].get("old_dirs", [])))
report("lbfgs_256_image_parameter_history_100")

opt = closure = None
hi = F.interpolate(img.detach().clamp(0, 1), size=(512, 512), mode="bilinear", align_corners=False)
content = F.interpolate(content, size=(512, 512), mode="bilinear", align_corners=False)
style = torch.rand(1, 3, 512, 512, device=dev)
grams, content_t = targets(content, style)
img = nn.Parameter(hi)
del hi
opt = torch.optim.LBFGS([img], lr=1.0, max_iter=10, history_size=100, line_search_fn="strong_wolfe")


def closure():
    opt.zero_grad()
    with torch.no_grad():
        img.clamp_(0, 1)
    loss = loss_fn(img, grams, content_t)
    loss.backward()
    return loss


for _ in range(2):
    loss = opt.step(closure)
print("lbfgs 512 strong wolfe loss", round(float(loss), 4), "func evals", opt.state[img].get("func_evals"))
report("coarse_to_fine_512_lbfgs_strong_wolfe")

opt = closure = img = None
del grams, content_t, loss
contents = torch.rand(4, 3, 384, 384, device=dev)
styles = torch.rand(4, 3, 384, 384, device=dev)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    fs = extract(styles)
    grams = {n: gram(fs[n].float()) for n in STYLE_LAYERS.values()}
    content_t = extract(contents)["relu4_2"].detach()
    del fs
imgs = contents.clone().requires_grad_(True)
adam = torch.optim.Adam([imgs], lr=0.02)
for _ in range(6):
    adam.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        f = extract(imgs)
        style_l = sum(F.mse_loss(gram(f[n].float()), grams[n]) for n in STYLE_LAYERS.values())
        content_l = F.mse_loss(f["relu4_2"].float(), content_t.float())
        loss = 1e5 * style_l + content_l + 1e-3 * tv(imgs)
    del f
    loss.backward()
    adam.step()
    with torch.no_grad():
        imgs.clamp_(0, 1)
print("batch adam loss", round(loss.item(), 4))
report("bf16_autocast_batch_4_styles_384_adam")

del loss, style_l, content_l
feats.clear()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    f = extract(imgs.detach())
    stats = {n: (gram(f[n]).float().norm().item(), f[n].float().mean().item()) for n in STYLE_LAYERS.values()}
    del f
feats.clear()
print("stats", {k: round(v[0], 4) for k, v in stats.items()})
report("inference_mode_bf16_feature_statistics")
