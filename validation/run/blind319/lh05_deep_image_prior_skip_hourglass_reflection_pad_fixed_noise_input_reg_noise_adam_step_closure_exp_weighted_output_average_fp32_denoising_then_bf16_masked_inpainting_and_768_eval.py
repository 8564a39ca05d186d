"""Deep Image Prior (Ulyanov, Vedaldi, Lempitsky 2018) as in the authors' denoising and inpainting
notebooks: an untrained "skip" hourglass network -- five levels of 128 channels, each down block
``ReflectionPad2d`` + stride-2 conv, BatchNorm, LeakyReLU; 4-channel 1x1 skip branches concatenated into
the bilinear-upsampled decoder -- is fitted to a single corrupted 512 x 512 image from a fixed
32-channel noise input (``torch.rand * 0.1``). The loop is the notebooks' ``optimize``: ``Adam`` driven
through ``optimizer.step(closure)``; inside the closure the input is perturbed with fresh noise
(``net_input_saved + noise.normal_() * reg_noise_std``), the output is smoothed by an exponential
average (``out_avg * 0.99 + out.detach() * 0.01``) and PSNR is printed from ``.item()``.

Phases: 0 the clean and noisy images, the fixed noise input and the net; 1 fp32 denoising (reg noise
1/30, 40 closure steps); 2 a fresh net inpainting a 512 x 512 image through a random-stripe mask
(``mse(out * mask, img * mask)``) under bf16 autocast, 30 closure steps; 3 both nets in eval mode
under no_grad on 768 x 768 noise inputs (fp32 and fp16 autocast)."""

import math

import torch
import torch.nn as nn

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float32


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def act():
    return nn.LeakyReLU(0.2, inplace=True)


def bn(num_features):
    return nn.BatchNorm2d(num_features)


def conv(in_f, out_f, kernel_size, stride=1, bias=True):
    to_pad = int((kernel_size - 1) / 2)
    layers = [nn.ReflectionPad2d(to_pad), nn.Conv2d(in_f, out_f, kernel_size, stride, padding=0, bias=bias)]
    return nn.Sequential(*layers)


class Concat(nn.Module):
    def __init__(self, dim, *modules):
        super().__init__()
        self.dim = dim
        for idx, module in enumerate(modules):
            self.add_module(str(idx), module)

    def forward(self, x):
        return torch.cat([module(x) for module in self._modules.values()], dim=self.dim)


def skip(
    num_input_channels=32,
    num_output_channels=3,
    channels_down=(128,) * 5,
    channels_up=(128,) * 5,
    channels_skip=(4,) * 5,
):
    """The DIP repo's ``skip`` network, built recursively: level i holds [skip | down -> deeper -> up]."""
    n_scales = len(channels_down)
    model = nn.Sequential()
    model_tmp = model
    input_depth = num_input_channels
    for i in range(n_scales):
        deeper = nn.Sequential()
        skip_branch = nn.Sequential()
        if channels_skip[i] != 0:
            model_tmp.add_module("concat", Concat(1, skip_branch, deeper))
        else:
            model_tmp.add_module("deeper", deeper)
        model_tmp.add_module(
            "bn", bn(channels_skip[i] + (channels_up[i + 1] if i < n_scales - 1 else channels_down[i]))
        )
        if channels_skip[i] != 0:
            skip_branch.add_module("conv", conv(input_depth, channels_skip[i], 1))
            skip_branch.add_module("bn", bn(channels_skip[i]))
            skip_branch.add_module("act", act())
        deeper.add_module("conv_down", conv(input_depth, channels_down[i], 3, 2))
        deeper.add_module("bn_down", bn(channels_down[i]))
        deeper.add_module("act_down", act())
        deeper.add_module("conv", conv(channels_down[i], channels_down[i], 3))
        deeper.add_module("bn", bn(channels_down[i]))
        deeper.add_module("act", act())
        deeper_main = nn.Sequential()
        if i == n_scales - 1:
            k = channels_down[i]
        else:
            deeper.add_module("deeper_main", deeper_main)
            k = channels_up[i + 1]
        deeper.add_module("upsample", nn.Upsample(scale_factor=2, mode="bilinear"))
        model_tmp.add_module("conv_up", conv(channels_skip[i] + k, channels_up[i], 3))
        model_tmp.add_module("bn_up", bn(channels_up[i]))
        model_tmp.add_module("act_up", act())
        model_tmp.add_module("conv_up_1x1", conv(channels_up[i], channels_up[i], 1))
        model_tmp.add_module("bn_up_1x1", bn(channels_up[i]))
        model_tmp.add_module("act_up_1x1", act())
        input_depth = channels_down[i]
        model_tmp = deeper_main
    model.add_module("conv_out", conv(channels_up[0], num_output_channels, 1))
    model.add_module("sigmoid", nn.Sigmoid())
    return model


def get_noise(input_depth, spatial_size, var=1.0 / 10):
    net_input = torch.zeros(1, input_depth, spatial_size[0], spatial_size[1], device=device)
    net_input.uniform_()
    net_input *= var
    return net_input


def psnr(a, b):
    return 10 * math.log10(1.0 / max(torch.mean((a - b) ** 2).item(), 1e-12))


# a smooth "photograph" and its noisy version (sigma 25 / 255)
img_torch = torch.nn.functional.interpolate(
    torch.rand(1, 3, 32, 32, device=device), size=(512, 512), mode="bicubic", align_corners=False
).clamp(0, 1)
img_noisy_torch = (img_torch + torch.randn_like(img_torch) * 25 / 255).clamp(0, 1)
input_depth = 32
net = skip(input_depth, 3).to(device).type(dtype)
net_input = get_noise(input_depth, (512, 512)).type(dtype).detach()
mse = torch.nn.MSELoss().type(dtype)
print("number of params", sum(p.numel() for p in net.parameters()))
report("images, fixed noise input and skip net")

reg_noise_std = 1.0 / 30.0
exp_weight = 0.99
net_input_saved = net_input.detach().clone()
noise = net_input.detach().clone()
state = {"out_avg": None, "i": 0}


def closure():
    if reg_noise_std > 0:
        net_input = net_input_saved + (noise.normal_() * reg_noise_std)
    else:
        net_input = net_input_saved
    out = net(net_input)
    if state["out_avg"] is None:
        state["out_avg"] = out.detach()
    else:
        state["out_avg"] = state["out_avg"] * exp_weight + out.detach() * (1 - exp_weight)
    total_loss = mse(out, img_noisy_torch)
    total_loss.backward()
    if state["i"] % 10 == 0:
        print(
            f"Iteration {state['i']:05d} Loss {total_loss.item():.6f} "
            f"PSNR_noisy {psnr(out.detach(), img_noisy_torch):.2f} "
            f"PSNR_gt_sm {psnr(state['out_avg'], img_torch):.2f}"
        )
    state["i"] += 1
    return total_loss


optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
for _ in range(40):
    optimizer.zero_grad()
    optimizer.step(closure)
denoised = state["out_avg"]
report("fp32 denoising with step(closure), reg noise and output averaging")

# inpainting: a fresh net, a random stripe mask, bf16 autocast
img_inp = img_torch.clone()
mask = (torch.rand(1, 1, 512, 1, device=device) > 0.3).float().expand(1, 3, 512, 512).contiguous()
img_masked = img_inp * mask
net_inp = skip(input_depth, 3).to(device)
net_input_inp = get_noise(input_depth, (512, 512)).detach()
optimizer_inp = torch.optim.Adam(net_inp.parameters(), lr=0.01)
inp_state = {"i": 0}


def closure_inpaint():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = net_inp(net_input_inp + torch.randn_like(net_input_inp) * 0.03)
        total_loss = mse(out * mask, img_masked)
    total_loss.backward()
    if inp_state["i"] % 10 == 0:
        print(f"inpainting iteration {inp_state['i']} loss {total_loss.item():.6f}")
    inp_state["i"] += 1
    return total_loss


for _ in range(30):
    optimizer_inp.zero_grad()
    optimizer_inp.step(closure_inpaint)
report("bf16 autocast masked inpainting with a fresh net")

net.eval()
net_inp.eval()
with torch.no_grad():
    big_input = get_noise(input_depth, (768, 768))
    out_big = net(big_input)
    with torch.autocast("cuda", dtype=torch.float16):
        out_big_inp = net_inp(big_input)
    print(
        "eval outputs",
        tuple(out_big.shape),
        out_big_inp.dtype,
        "denoised psnr",
        round(psnr(denoised, img_torch), 2),
    )
report("eval mode 768x768 fp32 and fp16 under no_grad")
