"""2-D Gaussian splatting for image fitting (in the spirit of GaussianImage, Zhang et al. 2024, with the
parameterization and the training tricks of graphdeco-inria/gaussian-splatting), rasterized densely in
plain PyTorch: 8,192 Gaussians with means, log-scales and a rotation angle (covariance R S S^T R^T by
bmm, its inverse conic written out), colors and opacity logits, a fixed random depth per Gaussian that
orders them (argsort, index_select); every pixel of a 128 x 128 target evaluates every Gaussian: the
exponential of the quadratic form, alpha clamped to 0.99, front-to-back alpha compositing by an
exclusive cumprod of 1 - alpha along the Gaussians, the colors by a matmul of the compositing weights
(under bf16 autocast) plus a white background by the remaining transmittance. The loss is 3DGS's
0.8 * L1 + 0.2 * (1 - SSIM), SSIM by depthwise conv2d with an 11 x 11 Gaussian window; Adam with
3DGS's per-parameter groups (means 1.6e-4, colors 2.5e-3, opacity 0.05, scales 5e-3, rotation 1e-3;
eps 1e-15). The first step its own phase, then 4 steps accumulating the mean gradients' norms; then
3DGS-style densification: the 2,048 Gaussians of largest accumulated gradient cloned
(`cat_tensors_to_optimizer`: Adam's exp_avg and exp_avg_sq extended by zeros, the parameters
replaced) and the 1,024 of lowest opacity pruned (`_prune_optimizer` by an index of the kept ones),
2 steps at 9,216 Gaussians; then a 512 x 512 render of the fitted image under no_grad in chunks of
16,384 pixels; 4 phases after the setup."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17704)
if SMALL:
    N_GAUSS, IMG, STEPS, N_CLONE, N_PRUNE, EVAL_IMG, EVAL_CHUNK = 64, 16, 3, 16, 8, 32, 256
else:
    N_GAUSS, IMG, STEPS, N_CLONE, N_PRUNE, EVAL_IMG, EVAL_CHUNK = 8192, 128, 5, 2048, 1024, 512, 16384
device = "cuda" if torch.cuda.is_available() else "cpu"


def inverse_sigmoid(x):
    return torch.log(x / (1 - x))


def gaussian(window_size, sigma):
    gauss = torch.tensor(
        [math.exp(-((x - window_size // 2) ** 2) / float(2 * sigma**2)) for x in range(window_size)]
    )
    return gauss / gauss.sum()


def create_window(window_size, channel):
    _1D_window = gaussian(window_size, 1.5).unsqueeze(1)
    _2D_window = _1D_window.mm(_1D_window.t()).float().unsqueeze(0).unsqueeze(0)
    return _2D_window.expand(channel, 1, window_size, window_size).contiguous()


def ssim(img1, img2, window_size=11):
    channel = img1.size(-3)
    window = create_window(window_size, channel).to(img1.device).type_as(img1)
    mu1 = F.conv2d(img1, window, padding=window_size // 2, groups=channel)
    mu2 = F.conv2d(img2, window, padding=window_size // 2, groups=channel)
    mu1_sq, mu2_sq, mu1_mu2 = mu1.pow(2), mu2.pow(2), mu1 * mu2
    sigma1_sq = F.conv2d(img1 * img1, window, padding=window_size // 2, groups=channel) - mu1_sq
    sigma2_sq = F.conv2d(img2 * img2, window, padding=window_size // 2, groups=channel) - mu2_sq
    sigma12 = F.conv2d(img1 * img2, window, padding=window_size // 2, groups=channel) - mu1_mu2
    C1, C2 = 0.01**2, 0.03**2
    ssim_map = ((2 * mu1_mu2 + C1) * (2 * sigma12 + C2)) / (
        (mu1_sq + mu2_sq + C1) * (sigma1_sq + sigma2_sq + C2)
    )
    return ssim_map.mean()


class GaussianModel2D:
    def __init__(self, n):
        self._xyz = nn.Parameter(torch.rand(n, 2, device=device) * 2 - 1)
        self._scaling = nn.Parameter(torch.log(torch.full((n, 2), 2.0 / math.sqrt(n), device=device)))
        self._rotation = nn.Parameter(torch.rand(n, 1, device=device) * math.pi)
        self._features = nn.Parameter(torch.rand(n, 3, device=device))
        self._opacity = nn.Parameter(inverse_sigmoid(0.1 * torch.ones((n, 1), device=device)))
        self.depth = torch.rand(n, device=device)
        self.xyz_gradient_accum = torch.zeros((n, 1), device=device)
        self.denom = torch.zeros((n, 1), device=device)

    def training_setup(self):
        groups = [
            {"params": [self._xyz], "lr": 1.6e-4, "name": "xyz"},
            {"params": [self._features], "lr": 2.5e-3, "name": "f_dc"},
            {"params": [self._opacity], "lr": 0.05, "name": "opacity"},
            {"params": [self._scaling], "lr": 5e-3, "name": "scaling"},
            {"params": [self._rotation], "lr": 1e-3, "name": "rotation"},
        ]
        self.optimizer = torch.optim.Adam(groups, lr=0.0, eps=1e-15)

    def conics(self):
        s = torch.exp(self._scaling)
        c, sn = torch.cos(self._rotation[:, 0]), torch.sin(self._rotation[:, 0])
        R = torch.stack([torch.stack([c, -sn], -1), torch.stack([sn, c], -1)], -2)
        L = R @ torch.diag_embed(s)
        cov = L @ L.transpose(1, 2) + 1e-6 * torch.eye(2, device=device)
        a, b, d = cov[:, 0, 0], cov[:, 0, 1], cov[:, 1, 1]
        det = a * d - b * b
        return torch.stack([d / det, -b / det, a / det], -1)

    def render(self, pix, bg=1.0):
        order = torch.argsort(self.depth)
        conic = self.conics().index_select(0, order)
        means = self._xyz.index_select(0, order)
        opacity = torch.sigmoid(self._opacity).index_select(0, order)[:, 0]
        colors = torch.sigmoid(self._features).index_select(0, order)
        d = pix[:, None, :] - means[None, :, :]
        dx, dy = d[..., 0], d[..., 1]
        power = -0.5 * (conic[:, 0] * dx * dx + conic[:, 2] * dy * dy) - conic[:, 1] * dx * dy
        alpha = torch.clamp(opacity * torch.exp(power), max=0.99)
        T = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha], -1), -1)
        weights = alpha * T[:, :-1]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            rgb = weights @ colors
        return rgb.float() + T[:, -1:] * bg

    def replace_tensors(self, tensors_dict, cat):
        optimizable_tensors = {}
        for group in self.optimizer.param_groups:
            extension = tensors_dict[group["name"]]
            stored_state = self.optimizer.state.get(group["params"][0], None)
            if cat:
                new = torch.cat((group["params"][0], extension), dim=0)
            else:
                new = group["params"][0][extension]
            if stored_state is not None:
                if cat:
                    stored_state["exp_avg"] = torch.cat(
                        (stored_state["exp_avg"], torch.zeros_like(extension)), dim=0
                    )
                    stored_state["exp_avg_sq"] = torch.cat(
                        (stored_state["exp_avg_sq"], torch.zeros_like(extension)), dim=0
                    )
                else:
                    stored_state["exp_avg"] = stored_state["exp_avg"][extension]
                    stored_state["exp_avg_sq"] = stored_state["exp_avg_sq"][extension]
                del self.optimizer.state[group["params"][0]]
                group["params"][0] = nn.Parameter(new.requires_grad_(True))
                self.optimizer.state[group["params"][0]] = stored_state
            else:
                group["params"][0] = nn.Parameter(new.requires_grad_(True))
            optimizable_tensors[group["name"]] = group["params"][0]
        self._xyz = optimizable_tensors["xyz"]
        self._features = optimizable_tensors["f_dc"]
        self._opacity = optimizable_tensors["opacity"]
        self._scaling = optimizable_tensors["scaling"]
        self._rotation = optimizable_tensors["rotation"]

    def densify_and_prune(self, n_clone, n_prune):
        grads = self.xyz_gradient_accum / self.denom
        grads[grads.isnan()] = 0.0
        selected = torch.topk(grads[:, 0], n_clone).indices
        d = {
            "xyz": self._xyz[selected],
            "f_dc": self._features[selected],
            "opacity": self._opacity[selected],
            "scaling": self._scaling[selected],
            "rotation": self._rotation[selected],
        }
        self.replace_tensors(d, cat=True)
        self.depth = torch.cat([self.depth, self.depth[selected] + 1e-4])
        keep = torch.topk(self._opacity[:, 0], self._opacity.shape[0] - n_prune).indices.sort().values
        self.replace_tensors({k: keep for k in ("xyz", "f_dc", "opacity", "scaling", "rotation")}, cat=False)
        self.depth = self.depth[keep]
        n = self._xyz.shape[0]
        self.xyz_gradient_accum = torch.zeros((n, 1), device=device)
        self.denom = torch.zeros((n, 1), device=device)


gt_image = torch.rand(3, IMG, IMG, device=device)
gt_image = F.avg_pool2d(gt_image[None], 5, 1, 2)[0]
lin = torch.linspace(-1, 1, IMG, device=device)
yy, xx = torch.meshgrid(lin, lin, indexing="ij")
pix = torch.stack([xx, yy], -1).reshape(-1, 2)

gaussians = GaussianModel2D(N_GAUSS)
gaussians.training_setup()
print(f"gaussians {gaussians._xyz.shape[0]}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step():
    image = gaussians.render(pix).reshape(IMG, IMG, 3).permute(2, 0, 1)
    Ll1 = torch.abs(image - gt_image).mean()
    loss = 0.8 * Ll1 + 0.2 * (1.0 - ssim(image[None], gt_image[None]))
    loss.backward()
    with torch.no_grad():
        gaussians.xyz_gradient_accum += torch.norm(gaussians._xyz.grad, dim=-1, keepdim=True)
        gaussians.denom += 1
    gaussians.optimizer.step()
    gaussians.optimizer.zero_grad(set_to_none=True)
    return loss.item(), Ll1.item()


for step in range(STEPS):
    loss, l1 = train_step()
    print(f"step {step} loss {loss:.4f} l1 {l1:.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

gaussians.densify_and_prune(N_CLONE, N_PRUNE)
print(f"densified to {gaussians._xyz.shape[0]}")
for step in range(2):
    loss, l1 = train_step()
    print(f"dense step {step} loss {loss:.4f}")
if device == "cuda":
    print(f"densify peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    lin = torch.linspace(-1, 1, EVAL_IMG, device=device)
    yy, xx = torch.meshgrid(lin, lin, indexing="ij")
    eval_pix = torch.stack([xx, yy], -1).reshape(-1, 2)
    out = torch.cat(
        [gaussians.render(eval_pix[i : i + EVAL_CHUNK]) for i in range(0, eval_pix.shape[0], EVAL_CHUNK)]
    )
    out = out.reshape(EVAL_IMG, EVAL_IMG, 3).clamp(0, 1)
    up = F.interpolate(gt_image[None], size=(EVAL_IMG, EVAL_IMG), mode="bilinear", align_corners=True)[0]
    psnr = -10 * torch.log10(F.mse_loss(out.permute(2, 0, 1), up))
print(f"render {tuple(out.shape)} psnr {psnr.item():.2f}")
if device == "cuda":
    print(
        f"render allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
