"""VoxelMorph-style unsupervised deformable registration of 3-D volumes, written as the
voxelmorph repository's torch backend does (networks.VxmDense, layers.SpatialTransformer,
VecInt, ResizeTransform, losses.NCC and Grad): a 3-D U-Net (encoder 16, 32, 32, 32 with stride-2
max pooling, decoder 32, 32, 32, 32, 32, 16, 16, LeakyReLU 0.2, nearest upsampling and skip
concatenation) over the moving and fixed volumes stacked as 2 channels, a 3 x 3 x 3 flow head
(normal init, std 1e-5), the velocity field downsized by 2 with F.interpolate trilinear (and scaled),
integrated by scaling and squaring over 7 steps (each a grid_sample of the field by itself,
bilinear, align_corners=True on a 5-D grid built from a registered meshgrid buffer), resized back
up, and the moving image warped by it. Loss: local normalised cross correlation with a 9^3 window
(five conv3d with a ones filter over I, J, I^2, J^2, IJ) plus 0.01 x the l2 gradient of the
velocity field. fp32, Adam lr 1e-4, batch 2 pairs of 128 x 128 x 128, 2 steps (each its own phase);
then under no_grad a 4-label segmentation of the moving volume warped with mode='nearest' by the
integrated field and soft Dice against the fixed labels, batch 1 at 160 x 192 x 160; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions.normal import Normal

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16003)
if SMALL:
    B, SHAPE, EVAL_SHAPE, STEPS = 1, (32, 32, 32), (32, 48, 32), 2
else:
    B, SHAPE, EVAL_SHAPE, STEPS = 2, (128, 128, 128), (160, 192, 160), 2
INT_STEPS, INT_DOWNSIZE, LABELS = 7, 2, 4
device = "cuda" if torch.cuda.is_available() else "cpu"


class SpatialTransformer(nn.Module):
    def __init__(self, size, mode="bilinear"):
        super().__init__()
        self.mode = mode
        vectors = [torch.arange(0, s) for s in size]
        grids = torch.meshgrid(vectors, indexing="ij")
        grid = torch.stack(grids).unsqueeze(0).type(torch.FloatTensor)
        self.register_buffer("grid", grid, persistent=False)

    def forward(self, src, flow):
        new_locs = self.grid + flow
        shape = flow.shape[2:]
        for i in range(len(shape)):
            new_locs[:, i, ...] = 2 * (new_locs[:, i, ...] / (shape[i] - 1) - 0.5)
        new_locs = new_locs.permute(0, 2, 3, 4, 1)
        new_locs = new_locs[..., [2, 1, 0]]
        return F.grid_sample(src, new_locs, align_corners=True, mode=self.mode)


class VecInt(nn.Module):
    def __init__(self, inshape, nsteps):
        super().__init__()
        self.nsteps = nsteps
        self.scale = 1.0 / (2**self.nsteps)
        self.transformer = SpatialTransformer(inshape)

    def forward(self, vec):
        vec = vec * self.scale
        for _ in range(self.nsteps):
            vec = vec + self.transformer(vec, vec)
        return vec


class ResizeTransform(nn.Module):
    def __init__(self, vel_resize):
        super().__init__()
        self.factor = 1.0 / vel_resize

    def forward(self, x):
        if self.factor < 1:
            x = F.interpolate(x, align_corners=True, scale_factor=self.factor, mode="trilinear")
            x = self.factor * x
        elif self.factor > 1:
            x = self.factor * x
            x = F.interpolate(x, align_corners=True, scale_factor=self.factor, mode="trilinear")
        return x


class ConvBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.main = nn.Conv3d(cin, cout, 3, 1, 1)
        self.activation = nn.LeakyReLU(0.2)

    def forward(self, x):
        return self.activation(self.main(x))


class Unet(nn.Module):
    def __init__(self, enc=(16, 32, 32, 32), dec=(32, 32, 32, 32, 32, 16, 16)):
        super().__init__()
        self.pooling = nn.MaxPool3d(2)
        self.upsampling = nn.Upsample(scale_factor=2, mode="nearest")
        prev, encoder_nfs = 2, [2]
        self.encoder = nn.ModuleList()
        for nf in enc:
            self.encoder.append(nn.ModuleList([ConvBlock(prev, nf)]))
            prev = nf
            encoder_nfs.append(prev)
        encoder_nfs = list(reversed(encoder_nfs))
        self.decoder = nn.ModuleList()
        for i, nf in enumerate(dec[: len(enc)]):
            self.decoder.append(nn.ModuleList([ConvBlock(prev, nf)]))
            prev = nf + encoder_nfs[i]
        self.remaining = nn.ModuleList()
        for nf in dec[len(enc) :]:
            self.remaining.append(ConvBlock(prev, nf))
            prev = nf
        self.final_nf = prev

    def forward(self, x):
        history = [x]
        for convs in self.encoder:
            for conv in convs:
                x = conv(x)
            history.append(x)
            x = self.pooling(x)
        for convs in self.decoder:
            for conv in convs:
                x = conv(x)
            x = self.upsampling(x)
            x = torch.cat([x, history.pop()], dim=1)
        for conv in self.remaining:
            x = conv(x)
        return x


class VxmDense(nn.Module):
    def __init__(self, inshape):
        super().__init__()
        self.unet_model = Unet()
        self.flow = nn.Conv3d(self.unet_model.final_nf, 3, kernel_size=3, padding=1)
        self.flow.weight = nn.Parameter(Normal(0, 1e-5).sample(self.flow.weight.shape))
        self.flow.bias = nn.Parameter(torch.zeros(self.flow.bias.shape))
        self.resize = ResizeTransform(INT_DOWNSIZE)
        self.fullsize = ResizeTransform(1 / INT_DOWNSIZE)
        down_shape = [int(d / INT_DOWNSIZE) for d in inshape]
        self.integrate = VecInt(down_shape, INT_STEPS)
        self.transformer = SpatialTransformer(inshape)

    def forward(self, source, target):
        x = self.unet_model(torch.cat([source, target], dim=1))
        flow_field = self.flow(x)
        pos_flow = self.resize(flow_field)
        preint_flow = pos_flow
        pos_flow = self.integrate(pos_flow)
        pos_flow = self.fullsize(pos_flow)
        return self.transformer(source, pos_flow), preint_flow, pos_flow


def ncc_loss(y_true, y_pred, win=9):
    Ii, Ji = y_true, y_pred
    sum_filt = torch.ones([1, 1, win, win, win], device=Ii.device)
    pad_no = win // 2
    I2, J2, IJ = Ii * Ii, Ji * Ji, Ii * Ji
    I_sum = F.conv3d(Ii, sum_filt, stride=1, padding=pad_no)
    J_sum = F.conv3d(Ji, sum_filt, stride=1, padding=pad_no)
    I2_sum = F.conv3d(I2, sum_filt, stride=1, padding=pad_no)
    J2_sum = F.conv3d(J2, sum_filt, stride=1, padding=pad_no)
    IJ_sum = F.conv3d(IJ, sum_filt, stride=1, padding=pad_no)
    win_size = win**3
    u_I = I_sum / win_size
    u_J = J_sum / win_size
    cross = IJ_sum - u_J * I_sum - u_I * J_sum + u_I * u_J * win_size
    I_var = I2_sum - 2 * u_I * I_sum + u_I * u_I * win_size
    J_var = J2_sum - 2 * u_J * J_sum + u_J * u_J * win_size
    cc = cross * cross / (I_var * J_var + 1e-5)
    return -torch.mean(cc)


def grad_loss(y_pred):
    dy = torch.abs(y_pred[:, :, 1:, :, :] - y_pred[:, :, :-1, :, :])
    dx = torch.abs(y_pred[:, :, :, 1:, :] - y_pred[:, :, :, :-1, :])
    dz = torch.abs(y_pred[:, :, :, :, 1:] - y_pred[:, :, :, :, :-1])
    d = torch.mean(dx * dx) + torch.mean(dy * dy) + torch.mean(dz * dz)
    return d / 3.0


model = VxmDense(SHAPE).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    moving = torch.rand(B, 1, *SHAPE, device=device)
    fixed = torch.rand(B, 1, *SHAPE, device=device)
    moved, preint_flow, _ = model(moving, fixed)
    loss = ncc_loss(fixed, moved) + 0.01 * grad_loss(preint_flow)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del moved, preint_flow, loss, moving, fixed
eval_model = VxmDense(EVAL_SHAPE).to(device)
eval_model.load_state_dict(model.state_dict())
eval_model.eval()
warp_nearest = SpatialTransformer(EVAL_SHAPE, mode="nearest").to(device)
with torch.no_grad():
    moving = torch.rand(1, 1, *EVAL_SHAPE, device=device)
    fixed = torch.rand(1, 1, *EVAL_SHAPE, device=device)
    moving_seg = torch.randint(0, LABELS, (1, 1, *EVAL_SHAPE), device=device)
    fixed_seg = torch.randint(0, LABELS, (1, 1, *EVAL_SHAPE), device=device)
    _, _, flow = eval_model(moving, fixed)
    warped_seg = warp_nearest(moving_seg.float(), flow).long()
    a = F.one_hot(warped_seg[:, 0], LABELS).permute(0, 4, 1, 2, 3).float()
    b = F.one_hot(fixed_seg[:, 0], LABELS).permute(0, 4, 1, 2, 3).float()
    dice = (2 * (a * b).sum((2, 3, 4)) / (a.sum((2, 3, 4)) + b.sum((2, 3, 4))).clamp(min=1)).mean()
if device == "cuda":
    print(
        f"eval dice {dice.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
