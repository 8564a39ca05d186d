"""BigGAN at 128 x 128 as ajbrock/BigGAN-PyTorch (BigGAN.py, layers.py, train_fns.py) builds it, with
the spectral norm of torch.nn.utils.parametrizations.spectral_norm on every Conv2d, Linear and
Embedding of both networks (one power iteration per training forward): the generator with a shared
class embedding of 128, a hierarchical latent (z of 120 split into six chunks of 20: one to the
first Linear to 16 * ch x 4 x 4, one per block) and five up-sampling GBlocks (16, 16, 8, 4, 2, 1 x
ch with ch = 64; nearest up-sampling, 3 x 3 convolutions, a 1 x 1 shortcut) whose class-conditional
BatchNorm is BatchNorm2d(affine=False) scaled by 1 + Linear(y) and shifted by Linear(y) of the
concatenated embedding and chunk; a SAGAN self-attention block at 64 x 64 (theta, phi and g 1 x 1
convolutions, max pooling of phi and g, softmax of bmm); BN, ReLU and a 3 x 3 conv to RGB with tanh.
The discriminator: five DBlocks (the first with preactivation off, average pooling down) to 16 * ch,
attention at 64 x 64, ReLU, a sum over space, and the projection head (Linear(h) plus the sum of
embed(y) * h). Hinge losses, fp32 (TF32 matmuls as BigGAN-PyTorch leaves them off: off); Adam with
lr 1e-4 for G and 4e-4 for D, betas (0, 0.999), eps 1e-6; batch 64; two D steps per G step, with
G_D's concatenation of fake and real into one discriminator pass; 3 iterations (the first its own
phase); then BigGAN's "standing stats": the conditional BNs' running stats reset and re-accumulated
(momentum None) over 8 batches in train mode under no_grad, then 256 class-conditional samples in
eval mode under no_grad in batches of 64 with parametrize.cached(); 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import spectral_norm

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17303)
if SMALL:
    B, CH, RES, N_CLASSES, ITERS, STANDING, N_SAMPLE = 4, 4, 32, 10, 2, 2, 8
else:
    B, CH, RES, N_CLASSES, ITERS, STANDING, N_SAMPLE = 64, 64, 128, 1000, 3, 8, 256
DIM_Z, SHARED_DIM, D_STEPS = 120, 128, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
ARCH_G = {128: ([16, 16, 8, 4, 2], [16, 8, 4, 2, 1], 64), 32: ([4, 4, 4], [4, 4, 4], 16)}[RES]
ARCH_D = {128: ([3, 1, 2, 4, 8, 16], [1, 2, 4, 8, 16, 16], 64), 32: ([3, 4, 4, 4], [4, 4, 4, 4], 16)}[RES]


def SNConv2d(*a, **k):
    return spectral_norm(nn.Conv2d(*a, **k), eps=1e-6)


def SNLinear(*a, **k):
    return spectral_norm(nn.Linear(*a, **k), eps=1e-6)


def SNEmbedding(*a, **k):
    return spectral_norm(nn.Embedding(*a, **k), eps=1e-6)


class Attention(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.ch = ch
        self.theta = SNConv2d(ch, ch // 8, 1, bias=False)
        self.phi = SNConv2d(ch, ch // 8, 1, bias=False)
        self.g = SNConv2d(ch, ch // 2, 1, bias=False)
        self.o = SNConv2d(ch // 2, ch, 1, bias=False)
        self.gamma = nn.Parameter(torch.tensor(0.0))

    def forward(self, x):
        theta = self.theta(x)
        phi = F.max_pool2d(self.phi(x), [2, 2])
        g = F.max_pool2d(self.g(x), [2, 2])
        theta = theta.view(-1, self.ch // 8, x.shape[2] * x.shape[3])
        phi = phi.view(-1, self.ch // 8, x.shape[2] * x.shape[3] // 4)
        g = g.view(-1, self.ch // 2, x.shape[2] * x.shape[3] // 4)
        beta = F.softmax(torch.bmm(theta.transpose(1, 2), phi), -1)
        o = self.o(torch.bmm(g, beta.transpose(1, 2)).view(-1, self.ch // 2, x.shape[2], x.shape[3]))
        return self.gamma * o + x


class CCBN(nn.Module):
    def __init__(self, output_size, input_size):
        super().__init__()
        self.gain = SNLinear(input_size, output_size, bias=False)
        self.bias = SNLinear(input_size, output_size, bias=False)
        self.bn = nn.BatchNorm2d(output_size, affine=False, eps=1e-5, momentum=0.1)

    def forward(self, x, y):
        gain = (1 + self.gain(y)).view(y.size(0), -1, 1, 1)
        bias = self.bias(y).view(y.size(0), -1, 1, 1)
        return self.bn(x) * gain + bias


class GBlock(nn.Module):
    def __init__(self, cin, cout, cond_dim):
        super().__init__()
        self.conv1 = SNConv2d(cin, cout, 3, padding=1)
        self.conv2 = SNConv2d(cout, cout, 3, padding=1)
        self.conv_sc = SNConv2d(cin, cout, 1)
        self.bn1 = CCBN(cin, cond_dim)
        self.bn2 = CCBN(cout, cond_dim)

    def forward(self, x, y):
        h = F.relu(self.bn1(x, y))
        h = F.interpolate(h, scale_factor=2)
        x = F.interpolate(x, scale_factor=2)
        h = self.conv1(h)
        h = self.conv2(F.relu(self.bn2(h, y)))
        return h + self.conv_sc(x)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        ins, outs, attn = ARCH_G
        self.num_slots = len(ins) + 1
        self.z_chunk = DIM_Z // self.num_slots
        cond_dim = SHARED_DIM + self.z_chunk
        self.shared = nn.Embedding(N_CLASSES, SHARED_DIM)
        self.linear = SNLinear(self.z_chunk, ins[0] * CH * 4 * 4)
        self.first = ins[0] * CH
        self.blocks = nn.ModuleList()
        res = 4
        for cin, cout in zip(ins, outs, strict=True):
            res *= 2
            block = nn.ModuleList([GBlock(cin * CH, cout * CH, cond_dim)])
            if res == attn:
                block.append(Attention(cout * CH))
            self.blocks.append(block)
        self.out_bn = nn.BatchNorm2d(outs[-1] * CH)
        self.out_conv = SNConv2d(outs[-1] * CH, 3, 3, padding=1)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear, nn.Embedding)):
                nn.init.orthogonal_(
                    m.weight if not parametrize.is_parametrized(m) else m.parametrizations.weight.original
                )

    def forward(self, z, y):
        zs = torch.split(z, self.z_chunk, 1)
        z = zs[0]
        ys = [torch.cat([y, item], 1) for item in zs[1:]]
        h = self.linear(z).view(z.size(0), -1, 4, 4)
        for index, block in enumerate(self.blocks):
            h = block[0](h, ys[index])
            for extra in block[1:]:
                h = extra(h)
        return torch.tanh(self.out_conv(F.relu(self.out_bn(h))))


class DBlock(nn.Module):
    def __init__(self, cin, cout, preactivation, downsample):
        super().__init__()
        self.preactivation, self.downsample = preactivation, downsample
        self.conv1 = SNConv2d(cin, cout, 3, padding=1)
        self.conv2 = SNConv2d(cout, cout, 3, padding=1)
        self.learnable_sc = cin != cout or downsample
        if self.learnable_sc:
            self.conv_sc = SNConv2d(cin, cout, 1)

    def shortcut(self, x):
        if self.preactivation:
            if self.learnable_sc:
                x = self.conv_sc(x)
            if self.downsample:
                x = F.avg_pool2d(x, 2)
        else:
            if self.downsample:
                x = F.avg_pool2d(x, 2)
            if self.learnable_sc:
                x = self.conv_sc(x)
        return x

    def forward(self, x):
        h = F.relu(x) if self.preactivation else x
        h = self.conv2(F.relu(self.conv1(h)))
        if self.downsample:
            h = F.avg_pool2d(h, 2)
        return h + self.shortcut(x)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        ins, outs, attn = ARCH_D
        self.blocks = nn.ModuleList()
        res = RES
        for i, cout in enumerate(outs):
            cin = ins[i] if i == 0 else ins[i] * CH
            down = i < len(outs) - 1
            block = nn.ModuleList([DBlock(cin, cout * CH, preactivation=i > 0, downsample=down)])
            if down:
                res //= 2
            if res == attn and down:
                block.append(Attention(cout * CH))
            self.blocks.append(block)
        self.linear = SNLinear(outs[-1] * CH, 1)
        self.embed = SNEmbedding(N_CLASSES, outs[-1] * CH)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear, nn.Embedding)):
                nn.init.orthogonal_(m.parametrizations.weight.original)

    def forward(self, x, y):
        h = x
        for block in self.blocks:
            for layer in block:
                h = layer(h)
        h = torch.sum(F.relu(h), [2, 3])
        out = self.linear(h)
        return out + torch.sum(self.embed(y) * h, 1, keepdim=True)


def G_D(G, D, z, gy, x=None, dy=None, train_G=False):
    with torch.set_grad_enabled(train_G):
        G_z = G(z, G.shared(gy))
    if x is not None:
        D_input = torch.cat([G_z, x], 0)
        D_class = torch.cat([gy, dy], 0)
        D_out = D(D_input, D_class)
        return torch.split(D_out, [G_z.shape[0], x.shape[0]])
    return D(G_z, gy)


def discriminator_loss(dis_fake, dis_real):
    return torch.mean(F.relu(1.0 - dis_real)), torch.mean(F.relu(1.0 + dis_fake))


def toggle_grad(model, on):
    for p in model.parameters():
        p.requires_grad = on


G = Generator().to(device)
D = Discriminator().to(device)
G_optim = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.0, 0.999), weight_decay=0, eps=1e-6)
D_optim = torch.optim.Adam(D.parameters(), lr=4e-4, betas=(0.0, 0.999), weight_decay=0, eps=1e-6)
data_gen = torch.Generator().manual_seed(17303)
print(f"G {sum(p.numel() for p in G.parameters())} D {sum(p.numel() for p in D.parameters())}")
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

G.train()
D.train()
for it in range(ITERS):
    x = (torch.rand(B * D_STEPS, 3, RES, RES, generator=data_gen) * 2 - 1).to(device)
    y = torch.randint(0, N_CLASSES, (B * D_STEPS,), generator=data_gen).to(device)
    xs, ys = torch.split(x, B), torch.split(y, B)
    toggle_grad(D, True)
    toggle_grad(G, False)
    counter = 0
    for _ in range(D_STEPS):
        D_optim.zero_grad()
        z_ = torch.randn(B, DIM_Z, device=device)
        y_ = torch.randint(0, N_CLASSES, (B,), device=device)
        D_fake, D_real = G_D(G, D, z_, y_, xs[counter], ys[counter], train_G=False)
        D_loss_real, D_loss_fake = discriminator_loss(D_fake, D_real)
        D_loss = D_loss_real + D_loss_fake
        D_loss.backward()
        counter += 1
        D_optim.step()
    toggle_grad(D, False)
    toggle_grad(G, True)
    G_optim.zero_grad()
    z_ = torch.randn(B, DIM_Z, device=device)
    y_ = torch.randint(0, N_CLASSES, (B,), device=device)
    D_fake = G_D(G, D, z_, y_, train_G=True)
    G_loss = -torch.mean(D_fake)
    G_loss.backward()
    G_optim.step()
    print(f"itr {it} G {G_loss.item():.4f} D_real {D_loss_real.item():.4f} D_fake {D_loss_fake.item():.4f}")
    if device == "cuda" and it in (0, ITERS - 1):
        print(f"itr {it} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del x, y, xs, ys, z_, y_, D_fake, D_real, D_loss, G_loss

# utils.accumulate_standing_stats
for module in G.modules():
    if isinstance(module, nn.BatchNorm2d):
        module.reset_running_stats()
        module.momentum = None
G.train()
with torch.no_grad():
    for _ in range(STANDING):
        z_ = torch.randn(B, DIM_Z, device=device)
        y_ = torch.randint(0, N_CLASSES, (B,), device=device)
        G(z_, G.shared(y_))
G.eval()
if device == "cuda":
    print(f"standing peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

samples = []
with torch.no_grad(), parametrize.cached():
    for start in range(0, N_SAMPLE, B):
        z_ = torch.randn(B, DIM_Z, device=device)
        y_ = torch.arange(start, start + B, device=device) % N_CLASSES
        samples.append(((G(z_, G.shared(y_)) + 1) * 127.5).clamp(0, 255).to(torch.uint8))
samples = torch.cat(samples).cpu()
print(f"samples {tuple(samples.shape)} mean {samples.float().mean().item():.2f}")
if device == "cuda":
    print(f"sample peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
