"""fastMRI's End-to-End VarNet (facebookresearch/fastMRI, fastmri/models/varnet.py, fastmri/fftc.py,
fastmri/losses.py), written by hand: multi-coil k-space held as real tensors with a trailing dim of 2,
the centered orthonormal 2-D FFT as fastMRI's `fft2c` (`ifftshift` over (-3, -2), `view_as_complex`,
`torch.fft.fftn(dim=(-2, -1), norm="ortho")`, `view_as_real`, `fftshift`) and `ifft2c` likewise.
A sensitivity-map network (the 24 central k-space lines, fixed, masked out of the rest, `ifft2c`, a
NormUnet over each coil as a batch, divided by the root-sum-of-squares over coils), then 8 cascades,
each `kspace - soft_dc * mask * (current - ref) - sens_expand(NormUnet(sens_reduce(current)))`
(`sens_reduce` = `ifft2c` times `complex_conj(sens)` summed over coils; `sens_expand` = `fft2c` of
`complex_mul(image, sens)`), complex multiplies written out on the last dim as fastMRI does. Each
NormUnet normalizes by group mean and std, pads H and W to multiples of 16 (`F.pad`), runs a 4-pool
U-Net (chans 18; InstanceNorm2d, LeakyReLU 0.2, Dropout2d 0, transpose-conv upsampling) and
unpads. Output: `rss(complex_abs(ifft2c(kspace)))`, center-cropped to 320 x 320 and scored by
fastMRI's SSIMLoss (7 x 7 uniform window as a conv2d, k1 0.01, k2 0.03). 16 coils of 640 x 368
k-space (knee-sized), 4x equispaced undersampling mask (fixed). fp32, Adam. Phase 1: 4 steps at
batch 2 (fastMRI trains at 1). Phase 2: reconstruction of 4 slices one at a time under
inference_mode. Fixed sizes. 2 phases."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2684)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def fft2c(data):
    data = torch.fft.ifftshift(data, dim=[-3, -2])
    data = torch.view_as_real(torch.fft.fftn(torch.view_as_complex(data), dim=(-2, -1), norm="ortho"))
    return torch.fft.fftshift(data, dim=[-3, -2])


def ifft2c(data):
    data = torch.fft.ifftshift(data, dim=[-3, -2])
    data = torch.view_as_real(torch.fft.ifftn(torch.view_as_complex(data), dim=(-2, -1), norm="ortho"))
    return torch.fft.fftshift(data, dim=[-3, -2])


def complex_mul(x, y):
    re = x[..., 0] * y[..., 0] - x[..., 1] * y[..., 1]
    im = x[..., 0] * y[..., 1] + x[..., 1] * y[..., 0]
    return torch.stack((re, im), dim=-1)


def complex_conj(x):
    return torch.stack((x[..., 0], -x[..., 1]), dim=-1)


def complex_abs(x):
    return (x**2).sum(dim=-1).sqrt()


def rss(x, dim=0):
    return torch.sqrt((x**2).sum(dim))


def center_crop(x, shape):
    h0 = (x.shape[-2] - shape[0]) // 2
    w0 = (x.shape[-1] - shape[1]) // 2
    return x[..., h0 : h0 + shape[0], w0 : w0 + shape[1]]


class ConvBlock(nn.Sequential):
    def __init__(self, i, o):
        super().__init__(
            nn.Conv2d(i, o, 3, padding=1, bias=False),
            nn.InstanceNorm2d(o),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Dropout2d(0.0),
            nn.Conv2d(o, o, 3, padding=1, bias=False),
            nn.InstanceNorm2d(o),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Dropout2d(0.0),
        )


class TransposeConvBlock(nn.Sequential):
    def __init__(self, i, o):
        super().__init__(
            nn.ConvTranspose2d(i, o, 2, stride=2, bias=False), nn.InstanceNorm2d(o), nn.LeakyReLU(0.2, True)
        )


class Unet(nn.Module):
    def __init__(self, in_chans, out_chans, chans, num_pools):
        super().__init__()
        self.down = nn.ModuleList([ConvBlock(in_chans, chans)])
        ch = chans
        for _ in range(num_pools - 1):
            self.down.append(ConvBlock(ch, ch * 2))
            ch *= 2
        self.conv = ConvBlock(ch, ch * 2)
        self.up_conv, self.up_t = nn.ModuleList(), nn.ModuleList()
        for _ in range(num_pools - 1):
            self.up_t.append(TransposeConvBlock(ch * 2, ch))
            self.up_conv.append(ConvBlock(ch * 2, ch))
            ch //= 2
        self.up_t.append(TransposeConvBlock(ch * 2, ch))
        self.up_conv.append(nn.Sequential(ConvBlock(ch * 2, ch), nn.Conv2d(ch, out_chans, 1)))

    def forward(self, x):
        stack = []
        for layer in self.down:
            x = layer(x)
            stack.append(x)
            x = F.avg_pool2d(x, 2, 2)
        x = self.conv(x)
        for t, c in zip(self.up_t, self.up_conv, strict=True):
            skip = stack.pop()
            x = t(x)
            pad = [0, 0, 0, 0]
            if x.shape[-1] != skip.shape[-1]:
                pad[1] = 1
            if x.shape[-2] != skip.shape[-2]:
                pad[3] = 1
            if sum(pad):
                x = F.pad(x, pad, "reflect")
            x = c(torch.cat([x, skip], dim=1))
        return x


class NormUnet(nn.Module):
    def __init__(self, chans, num_pools):
        super().__init__()
        self.unet = Unet(2, 2, chans, num_pools)

    def forward(self, x):
        # x: (b, c, h, w, 2) with c == 1 here
        b, c, h, w, _ = x.shape
        x = x.permute(0, 4, 1, 2, 3).reshape(b, 2 * c, h, w)
        xg = x.reshape(b, 2, c * h * w)
        mean = xg.mean(dim=2).view(b, 2, 1, 1)
        std = xg.std(dim=2).view(b, 2, 1, 1)
        x = (x - mean) / std
        w_mult, h_mult = ((w - 1) | 15) + 1, ((h - 1) | 15) + 1
        wp = [(w_mult - w) // 2, w_mult - w - (w_mult - w) // 2]
        hp = [(h_mult - h) // 2, h_mult - h - (h_mult - h) // 2]
        x = F.pad(x, wp + hp)
        x = self.unet(x)
        x = x[..., hp[0] : h_mult - hp[1], wp[0] : w_mult - wp[1]]
        x = x * std + mean
        return x.view(b, 2, c, h, w).permute(0, 2, 3, 4, 1).contiguous()


class SensitivityModel(nn.Module):
    def __init__(self, chans=8, num_pools=4, num_low_freqs=24):
        super().__init__()
        self.norm_unet = NormUnet(chans, num_pools)
        self.num_low_freqs = num_low_freqs

    def forward(self, masked_kspace):
        W = masked_kspace.shape[-2]
        pad = (W - self.num_low_freqs + 1) // 2
        low = torch.zeros_like(masked_kspace)
        low[..., pad : pad + self.num_low_freqs, :] = masked_kspace[..., pad : pad + self.num_low_freqs, :]
        images = ifft2c(low)
        b, c = images.shape[:2]
        x = self.norm_unet(images.reshape(b * c, 1, *images.shape[2:])).view(b, c, *images.shape[2:])
        return x / rss(complex_abs(x), dim=1).unsqueeze(-1).unsqueeze(1)


class VarNetBlock(nn.Module):
    def __init__(self, chans, num_pools):
        super().__init__()
        self.model = NormUnet(chans, num_pools)
        self.dc_weight = nn.Parameter(torch.ones(1))

    def forward(self, current, ref, mask, sens):
        zero = torch.zeros(1, 1, 1, 1, 1, device=current.device)
        soft_dc = torch.where(mask, current - ref, zero) * self.dc_weight
        reduced = complex_mul(ifft2c(current), complex_conj(sens)).sum(dim=1, keepdim=True)
        model_term = fft2c(complex_mul(self.model(reduced), sens))
        return current - soft_dc - model_term


class VarNet(nn.Module):
    def __init__(self, cascades=8, chans=18, pools=4, sens_chans=8):
        super().__init__()
        self.sens_net = SensitivityModel(sens_chans, pools)
        self.cascades = nn.ModuleList(VarNetBlock(chans, pools) for _ in range(cascades))

    def forward(self, masked_kspace, mask):
        sens = self.sens_net(masked_kspace)
        k = masked_kspace.clone()
        for c in self.cascades:
            k = c(k, masked_kspace, mask, sens)
        return rss(complex_abs(ifft2c(k)), dim=1)


class SSIMLoss(nn.Module):
    def __init__(self, win_size=7, k1=0.01, k2=0.03):
        super().__init__()
        self.win_size, self.k1, self.k2 = win_size, k1, k2
        self.register_buffer("w", torch.ones(1, 1, win_size, win_size) / win_size**2)
        np_ = win_size**2
        self.cov_norm = np_ / (np_ - 1)

    def forward(self, X, Y, data_range):
        data_range = data_range[:, None, None, None]
        C1 = (self.k1 * data_range) ** 2
        C2 = (self.k2 * data_range) ** 2
        ux, uy = F.conv2d(X, self.w), F.conv2d(Y, self.w)
        uxx, uyy, uxy = F.conv2d(X * X, self.w), F.conv2d(Y * Y, self.w), F.conv2d(X * Y, self.w)
        vx = self.cov_norm * (uxx - ux * ux)
        vy = self.cov_norm * (uyy - uy * uy)
        vxy = self.cov_norm * (uxy - ux * uy)
        A1, A2 = 2 * ux * uy + C1, 2 * vxy + C2
        B1, B2 = ux**2 + uy**2 + C1, vx + vy + C2
        S = (A1 * A2) / (B1 * B2)
        return 1 - S.mean()


COILS, H, W = 16, 640, 368
cols = torch.zeros(W, dtype=torch.bool)
cols[::4] = True
cols[(W - 24 + 1) // 2 : (W - 24 + 1) // 2 + 24] = True
mask = cols.view(1, 1, 1, W, 1).to(dev)

model = VarNet().to(dev)
ssim = SSIMLoss().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=3e-4)
report("setup")

for step in range(4):
    kspace = torch.randn(2, COILS, H, W, 2, device=dev)
    masked = kspace * mask
    target = center_crop(rss(complex_abs(ifft2c(kspace)), dim=1), (320, 320))
    out = center_crop(model(masked, mask), (320, 320))
    max_value = target.amax(dim=(1, 2))
    loss = ssim(out.unsqueeze(1), target.unsqueeze(1), data_range=max_value)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
report("train")

model.eval()
recons = []
with torch.inference_mode():
    for _ in range(4):
        kspace = torch.randn(1, COILS, H, W, 2, device=dev)
        recons.append(center_crop(model(kspace * mask, mask), (320, 320)))
    recons = torch.cat(recons)
    print("recons", tuple(recons.shape), float(recons.mean()))
report("recon")
print("done")
