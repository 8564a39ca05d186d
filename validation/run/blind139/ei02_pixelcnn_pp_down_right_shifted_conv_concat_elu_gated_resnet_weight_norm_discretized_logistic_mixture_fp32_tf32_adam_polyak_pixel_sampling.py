"""PixelCNN++ (Salimans et al. 2017) as the common PyTorch port writes it by hand: down-shifted
(2 x 3) and down-right-shifted (2 x 2) convolutions by nn.ZeroPad2d, their transposed versions
cropped, weight-normalised layers (nn.utils.parametrizations.weight_norm), concat_elu, gated
resnet blocks with the u (vertical) and ul (vertical + horizontal) streams, three scales of 5
blocks down by strided shifted convolutions and up by transposed ones with the skip lists popped,
`nin` 1 x 1 layers as Linear over a permuted view, and the discretized logistic mixture likelihood
of 10 components (the full loss with its log-sum-exp and the edge cases by torch.where); fp32 with
TF32 matmuls allowed, 160 filters, batch 24 at 32 x 32, Adam with exponential decay and a Polyak
average kept by torch._foreach_lerp_ in a deepcopy; 3 steps; test bits/dim of the averaged model at
batch 64 under no_grad; then sampling of the first 20 pixels of 16 images (one forward a pixel,
Gumbel-max mixture choice, logistic sample); 6 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13902)
B, TB, SB, NF, NR, PIX = (2, 2, 2, 16, 1, 3) if SMALL else (24, 64, 16, 160, 5, 20)
NR_MIX = 10
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True


def concat_elu(x):
    return F.elu(torch.cat([x, -x], dim=1))


class nin(nn.Module):
    def __init__(self, dim_in, dim_out):
        super().__init__()
        self.lin_a = weight_norm(nn.Linear(dim_in, dim_out))
        self.dim_out = dim_out

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        shp = list(x.shape)
        out = self.lin_a(x.contiguous().view(shp[0] * shp[1] * shp[2], shp[3]))
        shp[-1] = self.dim_out
        return out.view(shp).permute(0, 3, 1, 2)


class down_shifted_conv2d(nn.Module):
    def __init__(self, cin, cout, filter_size=(2, 3), stride=(1, 1), shift_output_down=False):
        super().__init__()
        self.conv = weight_norm(nn.Conv2d(cin, cout, filter_size, stride))
        self.pad = nn.ZeroPad2d(((filter_size[1] - 1) // 2, (filter_size[1] - 1) // 2, filter_size[0] - 1, 0))
        self.shift_output_down = shift_output_down

    def forward(self, x):
        x = self.conv(self.pad(x))
        return F.pad(x[:, :, :-1, :], (0, 0, 1, 0)) if self.shift_output_down else x


class down_right_shifted_conv2d(nn.Module):
    def __init__(self, cin, cout, filter_size=(2, 2), stride=(1, 1), shift_output_right=False):
        super().__init__()
        self.conv = weight_norm(nn.Conv2d(cin, cout, filter_size, stride))
        self.pad = nn.ZeroPad2d((filter_size[1] - 1, 0, filter_size[0] - 1, 0))
        self.shift_output_right = shift_output_right

    def forward(self, x):
        x = self.conv(self.pad(x))
        return F.pad(x[:, :, :, :-1], (1, 0, 0, 0)) if self.shift_output_right else x


class down_shifted_deconv2d(nn.Module):
    def __init__(self, cin, cout, filter_size=(2, 3), stride=(2, 2)):
        super().__init__()
        self.deconv = weight_norm(nn.ConvTranspose2d(cin, cout, filter_size, stride, output_padding=1))
        self.filter_size = filter_size

    def forward(self, x):
        x = self.deconv(x)
        xs = x.shape
        fs = self.filter_size
        return x[:, :, : (xs[2] - fs[0] + 1), (fs[1] - 1) // 2 : (xs[3] - (fs[1] - 1) // 2)]


class down_right_shifted_deconv2d(nn.Module):
    def __init__(self, cin, cout, filter_size=(2, 2), stride=(2, 2)):
        super().__init__()
        self.deconv = weight_norm(nn.ConvTranspose2d(cin, cout, filter_size, stride, output_padding=1))
        self.filter_size = filter_size

    def forward(self, x):
        x = self.deconv(x)
        xs = x.shape
        fs = self.filter_size
        return x[:, :, : (xs[2] - fs[0] + 1) :, : (xs[3] - fs[1] + 1)]


class gated_resnet(nn.Module):
    def __init__(self, nf, conv_op, skip_connection=0):
        super().__init__()
        self.conv_input = conv_op(2 * nf, nf)
        self.skip_connection = skip_connection
        if skip_connection:
            self.nin_skip = nin(2 * skip_connection * nf, nf)
        self.dropout = nn.Dropout2d(0.5)
        self.conv_out = conv_op(2 * nf, 2 * nf)

    def forward(self, og_x, a=None):
        x = self.conv_input(concat_elu(og_x))
        if a is not None:
            x = x + self.nin_skip(concat_elu(a))
        x = self.conv_out(self.dropout(concat_elu(x)))
        a, b = torch.chunk(x, 2, dim=1)
        return og_x + a * torch.sigmoid(b)


class PixelCNNLayer_up(nn.Module):
    def __init__(self, nr_resnet, nf):
        super().__init__()
        self.u_stream = nn.ModuleList(gated_resnet(nf, down_shifted_conv2d) for _ in range(nr_resnet))
        self.ul_stream = nn.ModuleList(
            gated_resnet(nf, down_right_shifted_conv2d, skip_connection=1) for _ in range(nr_resnet)
        )

    def forward(self, u, ul):
        u_list, ul_list = [], []
        for us, uls in zip(self.u_stream, self.ul_stream, strict=False):
            u = us(u)
            ul = uls(ul, a=u)
            u_list.append(u)
            ul_list.append(ul)
        return u_list, ul_list


class PixelCNNLayer_down(nn.Module):
    def __init__(self, nr_resnet, nf):
        super().__init__()
        self.u_stream = nn.ModuleList(
            gated_resnet(nf, down_shifted_conv2d, skip_connection=1) for _ in range(nr_resnet)
        )
        self.ul_stream = nn.ModuleList(
            gated_resnet(nf, down_right_shifted_conv2d, skip_connection=2) for _ in range(nr_resnet)
        )

    def forward(self, u, ul, u_list, ul_list):
        for us, uls in zip(self.u_stream, self.ul_stream, strict=False):
            u = us(u, a=u_list.pop())
            ul = uls(ul, a=torch.cat((u, ul_list.pop()), 1))
        return u, ul


class PixelCNN(nn.Module):
    def __init__(self, nr_resnet=5, nf=160, nr_mix=10, input_channels=3):
        super().__init__()
        down_nr = [nr_resnet, nr_resnet + 1, nr_resnet + 1]
        self.down_layers = nn.ModuleList(PixelCNNLayer_down(down_nr[i], nf) for i in range(3))
        self.up_layers = nn.ModuleList(PixelCNNLayer_up(nr_resnet, nf) for _ in range(3))
        self.downsize_u = nn.ModuleList(down_shifted_conv2d(nf, nf, stride=(2, 2)) for _ in range(2))
        self.downsize_ul = nn.ModuleList(down_right_shifted_conv2d(nf, nf, stride=(2, 2)) for _ in range(2))
        self.upsize_u = nn.ModuleList(down_shifted_deconv2d(nf, nf, stride=(2, 2)) for _ in range(2))
        self.upsize_ul = nn.ModuleList(down_right_shifted_deconv2d(nf, nf, stride=(2, 2)) for _ in range(2))
        self.u_init = down_shifted_conv2d(input_channels + 1, nf, filter_size=(2, 3), shift_output_down=True)
        self.ul_init = nn.ModuleList(
            [
                down_shifted_conv2d(input_channels + 1, nf, filter_size=(1, 3), shift_output_down=True),
                down_right_shifted_conv2d(
                    input_channels + 1, nf, filter_size=(2, 1), shift_output_right=True
                ),
            ]
        )
        self.nin_out = nin(nf, 10 * nr_mix)

    def forward(self, x):
        xs = x.shape
        padding = torch.ones(xs[0], 1, xs[2], xs[3], device=x.device)
        x = torch.cat((x, padding), 1)
        u_list = [self.u_init(x)]
        ul_list = [self.ul_init[0](x) + self.ul_init[1](x)]
        for i in range(3):
            u_out, ul_out = self.up_layers[i](u_list[-1], ul_list[-1])
            u_list += u_out
            ul_list += ul_out
            if i != 2:
                u_list += [self.downsize_u[i](u_list[-1])]
                ul_list += [self.downsize_ul[i](ul_list[-1])]
        u = u_list.pop()
        ul = ul_list.pop()
        for i in range(3):
            u, ul = self.down_layers[i](u, ul, u_list, ul_list)
            if i != 2:
                u = self.upsize_u[i](u)
                ul = self.upsize_ul[i](ul)
        return self.nin_out(F.elu(ul))


def log_sum_exp(x):
    axis = len(x.size()) - 1
    m, _ = torch.max(x, dim=axis)
    m2, _ = torch.max(x, dim=axis, keepdim=True)
    return m + torch.log(torch.sum(torch.exp(x - m2), dim=axis))


def log_prob_from_logits(x):
    axis = len(x.size()) - 1
    m, _ = torch.max(x, dim=axis, keepdim=True)
    return x - m - torch.log(torch.sum(torch.exp(x - m), dim=axis, keepdim=True))


def discretized_mix_logistic_loss(x, lp):
    x = x.permute(0, 2, 3, 1)
    lp = lp.permute(0, 2, 3, 1)
    xs = list(x.size())
    ls = list(lp.size())
    nr_mix = ls[-1] // 10
    logit_probs = lp[:, :, :, :nr_mix]
    lp = lp[:, :, :, nr_mix:].contiguous().view([*xs, nr_mix * 3])
    means = lp[:, :, :, :, :nr_mix]
    log_scales = torch.clamp(lp[:, :, :, :, nr_mix : 2 * nr_mix], min=-7.0)
    coeffs = torch.tanh(lp[:, :, :, :, 2 * nr_mix : 3 * nr_mix])
    x = x.contiguous().unsqueeze(-1) + torch.zeros([*xs, nr_mix], device=x.device)
    m2 = (means[:, :, :, 1, :] + coeffs[:, :, :, 0, :] * x[:, :, :, 0, :]).view(
        xs[0], xs[1], xs[2], 1, nr_mix
    )
    m3 = (
        means[:, :, :, 2, :]
        + coeffs[:, :, :, 1, :] * x[:, :, :, 0, :]
        + coeffs[:, :, :, 2, :] * x[:, :, :, 1, :]
    ).view(xs[0], xs[1], xs[2], 1, nr_mix)
    means = torch.cat((means[:, :, :, 0, :].unsqueeze(3), m2, m3), dim=3)
    centered_x = x - means
    inv_stdv = torch.exp(-log_scales)
    plus_in = inv_stdv * (centered_x + 1.0 / 255.0)
    cdf_plus = torch.sigmoid(plus_in)
    min_in = inv_stdv * (centered_x - 1.0 / 255.0)
    cdf_min = torch.sigmoid(min_in)
    log_cdf_plus = plus_in - F.softplus(plus_in)
    log_one_minus_cdf_min = -F.softplus(min_in)
    cdf_delta = cdf_plus - cdf_min
    mid_in = inv_stdv * centered_x
    log_pdf_mid = mid_in - log_scales - 2.0 * F.softplus(mid_in)
    inner_inner_cond = (cdf_delta > 1e-5).float()
    inner_inner_out = inner_inner_cond * torch.log(torch.clamp(cdf_delta, min=1e-12)) + (
        1.0 - inner_inner_cond
    ) * (log_pdf_mid - math.log(127.5))
    inner_cond = (x > 0.999).float()
    inner_out = inner_cond * log_one_minus_cdf_min + (1.0 - inner_cond) * inner_inner_out
    cond = (x < -0.999).float()
    log_probs = cond * log_cdf_plus + (1.0 - cond) * inner_out
    log_probs = torch.sum(log_probs, dim=3) + log_prob_from_logits(logit_probs)
    return -torch.sum(log_sum_exp(log_probs))


def sample_from_discretized_mix_logistic(lp, nr_mix):
    lp = lp.permute(0, 2, 3, 1)
    ls = [int(y) for y in lp.size()]
    xs = [*ls[:-1], 3]
    logit_probs = lp[:, :, :, :nr_mix]
    lp = lp[:, :, :, nr_mix:].contiguous().view([*xs, nr_mix * 3])
    temp = torch.empty_like(logit_probs).uniform_(1e-5, 1.0 - 1e-5)
    temp = logit_probs - torch.log(-torch.log(temp))
    _, argmax = temp.max(dim=3)
    one_hot = F.one_hot(argmax, nr_mix).float().view([*xs[:-1], 1, nr_mix])
    means = torch.sum(lp[:, :, :, :, :nr_mix] * one_hot, dim=4)
    log_scales = torch.clamp(torch.sum(lp[:, :, :, :, nr_mix : 2 * nr_mix] * one_hot, dim=4), min=-7.0)
    coeffs = torch.sum(torch.tanh(lp[:, :, :, :, 2 * nr_mix : 3 * nr_mix]) * one_hot, dim=4)
    u = torch.empty_like(means).uniform_(1e-5, 1.0 - 1e-5)
    x = means + torch.exp(log_scales) * (torch.log(u) - torch.log(1.0 - u))
    x0 = torch.clamp(torch.clamp(x[:, :, :, 0], min=-1.0), max=1.0)
    x1 = torch.clamp(torch.clamp(x[:, :, :, 1] + coeffs[:, :, :, 0] * x0, min=-1.0), max=1.0)
    x2 = torch.clamp(
        torch.clamp(x[:, :, :, 2] + coeffs[:, :, :, 1] * x0 + coeffs[:, :, :, 2] * x1, min=-1.0), max=1.0
    )
    out = torch.cat([x0.view([*xs[:-1], 1]), x1.view([*xs[:-1], 1]), x2.view([*xs[:-1], 1])], dim=3)
    return out.permute(0, 3, 1, 2)


def images(n):
    return (torch.randint(0, 256, (n, 3, 32, 32), device=device).float() / 127.5) - 1.0


model = PixelCNN(nr_resnet=NR, nf=NF, nr_mix=NR_MIX).to(device)
ema = copy.deepcopy(model)
for p in ema.parameters():
    p.requires_grad_(False)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.999995)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    x = images(B)
    loss = discretized_mix_logistic_loss(x, model(x))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    with torch.no_grad():
        torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - 0.9995)
    if device == "cuda":
        bpd = loss.item() / (math.log(2.0) * B * 3 * 32 * 32)
        print(
            f"step {step} bpd {bpd:.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss
ema.eval()
with torch.no_grad():
    x = images(TB)
    test_loss = discretized_mix_logistic_loss(x, ema(x))
if device == "cuda":
    bpd = test_loss.item() / (math.log(2.0) * TB * 3 * 32 * 32)
    print(
        f"test bpd {bpd:.3f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    data = torch.zeros(SB, 3, 32, 32, device=device)
    for k in range(PIX):
        i, j = divmod(k, 32)
        out_sample = sample_from_discretized_mix_logistic(ema(data), NR_MIX)
        data[:, :, i, j] = out_sample.data[:, :, i, j]
if device == "cuda":
    print(
        f"sampled {PIX} pixels mean {data[:, :, 0, :PIX].mean().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
