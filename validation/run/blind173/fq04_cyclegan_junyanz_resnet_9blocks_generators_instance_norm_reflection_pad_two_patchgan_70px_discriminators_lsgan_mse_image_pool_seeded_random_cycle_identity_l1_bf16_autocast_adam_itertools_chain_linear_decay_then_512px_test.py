"""CycleGAN as junyanz/pytorch-CycleGAN-and-pix2pix (models/cycle_gan_model.py, networks.py,
util/image_pool.py) writes it: two ResnetGenerators (ngf 64, ReflectionPad2d(3) and a 7 x 7 conv,
two stride-2 down-samplings, 9 ResnetBlocks with reflection padding and InstanceNorm2d(affine=False,
track_running_stats=False), two ConvTranspose2d(3, 2, 1, output_padding=1) up-samplings, tanh) and two
70 x 70 PatchGAN NLayerDiscriminators (ndf 64, 3 layers, InstanceNorm, LeakyReLU 0.2), init_weights
normal(0, 0.02); GANLoss('lsgan') = MSELoss against a registered label buffer expanded to the
prediction; the ImagePool of size 8 (util/image_pool.py: random.uniform > 0.5 swaps a stored
image's clone in, random.randint picks it; Python's random seeded) feeding the discriminators'
fakes; cycle L1 (lambda 10) and identity L1 (0.5). The forwards and losses under bf16 autocast;
Adam(itertools.chain(G_A, G_B), lr 2e-4, betas (0.5, 0.999)) and the same for the Ds, and
set_requires_grad(D, False) for the generators' step, as optimize_parameters; LambdaLR linear decay
after n_epochs; batch 4 of 256 x 256 crops; iteration 0 its own phase, iterations 1-2 (the pool full
after iteration 1, then swapping), iterations 3-5, then the test: G_A and G_B on 8 images of 512 x 512
each, one at a time under no_grad (as test.py with --preprocess none), real, fake and rec kept on
the GPU and moved to the host as uint8; 4 phases."""

import functools
import itertools
import os
import random

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17304)
random.seed(17304)
if SMALL:
    B, NGF, NDF, N_BLOCKS, CROP, TEST_SIZE, N_TEST, ITERS, POOL = 1, 8, 8, 2, 64, 64, 2, 6, 2
else:
    B, NGF, NDF, N_BLOCKS, CROP, TEST_SIZE, N_TEST, ITERS, POOL = 4, 64, 64, 9, 256, 512, 8, 6, 8
LAMBDA_A = LAMBDA_B = 10.0
LAMBDA_IDT = 0.5
N_EPOCHS, N_EPOCHS_DECAY, EPOCH_COUNT = 100, 100, 1
device = "cuda" if torch.cuda.is_available() else "cpu"
amp_device = "cuda" if device == "cuda" else "cpu"
norm_layer = functools.partial(nn.InstanceNorm2d, affine=False, track_running_stats=False)


class ResnetBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv_block = nn.Sequential(
            nn.ReflectionPad2d(1),
            nn.Conv2d(dim, dim, kernel_size=3, padding=0, bias=True),
            norm_layer(dim),
            nn.ReLU(True),
            nn.ReflectionPad2d(1),
            nn.Conv2d(dim, dim, kernel_size=3, padding=0, bias=True),
            norm_layer(dim),
        )

    def forward(self, x):
        return x + self.conv_block(x)


class ResnetGenerator(nn.Module):
    def __init__(self, input_nc=3, output_nc=3, ngf=NGF, n_blocks=N_BLOCKS):
        super().__init__()
        model = [
            nn.ReflectionPad2d(3),
            nn.Conv2d(input_nc, ngf, kernel_size=7, padding=0, bias=True),
            norm_layer(ngf),
            nn.ReLU(True),
        ]
        for i in range(2):
            mult = 2**i
            model += [
                nn.Conv2d(ngf * mult, ngf * mult * 2, kernel_size=3, stride=2, padding=1, bias=True),
                norm_layer(ngf * mult * 2),
                nn.ReLU(True),
            ]
        mult = 4
        model += [ResnetBlock(ngf * mult) for _ in range(n_blocks)]
        for i in range(2):
            mult = 2 ** (2 - i)
            model += [
                nn.ConvTranspose2d(
                    ngf * mult,
                    int(ngf * mult / 2),
                    kernel_size=3,
                    stride=2,
                    padding=1,
                    output_padding=1,
                    bias=True,
                ),
                norm_layer(int(ngf * mult / 2)),
                nn.ReLU(True),
            ]
        model += [nn.ReflectionPad2d(3), nn.Conv2d(ngf, output_nc, kernel_size=7, padding=0), nn.Tanh()]
        self.model = nn.Sequential(*model)

    def forward(self, x):
        return self.model(x)


class NLayerDiscriminator(nn.Module):
    def __init__(self, input_nc=3, ndf=NDF, n_layers=3):
        super().__init__()
        kw, padw = 4, 1
        sequence = [nn.Conv2d(input_nc, ndf, kernel_size=kw, stride=2, padding=padw), nn.LeakyReLU(0.2, True)]
        nf_mult = 1
        for n in range(1, n_layers):
            nf_mult_prev, nf_mult = nf_mult, min(2**n, 8)
            sequence += [
                nn.Conv2d(
                    ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=2, padding=padw, bias=True
                ),
                norm_layer(ndf * nf_mult),
                nn.LeakyReLU(0.2, True),
            ]
        nf_mult_prev, nf_mult = nf_mult, min(2**n_layers, 8)
        sequence += [
            nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=1, padding=padw, bias=True),
            norm_layer(ndf * nf_mult),
            nn.LeakyReLU(0.2, True),
        ]
        sequence += [nn.Conv2d(ndf * nf_mult, 1, kernel_size=kw, stride=1, padding=padw)]
        self.model = nn.Sequential(*sequence)

    def forward(self, x):
        return self.model(x)


def init_weights(net, init_gain=0.02):
    def init_func(m):
        classname = m.__class__.__name__
        if hasattr(m, "weight") and (classname.find("Conv") != -1 or classname.find("Linear") != -1):
            nn.init.normal_(m.weight.data, 0.0, init_gain)
            if hasattr(m, "bias") and m.bias is not None:
                nn.init.constant_(m.bias.data, 0.0)

    net.apply(init_func)
    return net


class GANLoss(nn.Module):
    def __init__(self, target_real_label=1.0, target_fake_label=0.0):
        super().__init__()
        self.register_buffer("real_label", torch.tensor(target_real_label))
        self.register_buffer("fake_label", torch.tensor(target_fake_label))
        self.loss = nn.MSELoss()

    def __call__(self, prediction, target_is_real):
        target_tensor = self.real_label if target_is_real else self.fake_label
        return self.loss(prediction, target_tensor.expand_as(prediction))


class ImagePool:
    def __init__(self, pool_size):
        self.pool_size = pool_size
        if self.pool_size > 0:
            self.num_imgs = 0
            self.images = []

    def query(self, images):
        if self.pool_size == 0:
            return images
        return_images = []
        for image in images:
            image = torch.unsqueeze(image.data, 0)
            if self.num_imgs < self.pool_size:
                self.num_imgs = self.num_imgs + 1
                self.images.append(image)
                return_images.append(image)
            else:
                p = random.uniform(0, 1)
                if p > 0.5:
                    random_id = random.randint(0, self.pool_size - 1)
                    tmp = self.images[random_id].clone()
                    self.images[random_id] = image
                    return_images.append(tmp)
                else:
                    return_images.append(image)
        return torch.cat(return_images, 0)


def set_requires_grad(nets, requires_grad=False):
    for net in nets:
        for param in net.parameters():
            param.requires_grad = requires_grad


netG_A = init_weights(ResnetGenerator()).to(device)
netG_B = init_weights(ResnetGenerator()).to(device)
netD_A = init_weights(NLayerDiscriminator()).to(device)
netD_B = init_weights(NLayerDiscriminator()).to(device)
criterionGAN = GANLoss().to(device)
criterionCycle = nn.L1Loss()
criterionIdt = nn.L1Loss()
fake_A_pool, fake_B_pool = ImagePool(POOL), ImagePool(POOL)
optimizer_G = torch.optim.Adam(
    itertools.chain(netG_A.parameters(), netG_B.parameters()), lr=2e-4, betas=(0.5, 0.999)
)
optimizer_D = torch.optim.Adam(
    itertools.chain(netD_A.parameters(), netD_B.parameters()), lr=2e-4, betas=(0.5, 0.999)
)


def lambda_rule(epoch):
    return 1.0 - max(0, epoch + EPOCH_COUNT - N_EPOCHS) / float(N_EPOCHS_DECAY + 1)


schedulers = [torch.optim.lr_scheduler.LambdaLR(o, lr_lambda=lambda_rule) for o in (optimizer_G, optimizer_D)]
data_gen = torch.Generator().manual_seed(17304)
print(f"G_A {sum(p.numel() for p in netG_A.parameters())} D_A {sum(p.numel() for p in netD_A.parameters())}")
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def load(n, size):
    return (torch.rand(n, 3, size, size, generator=data_gen) * 2 - 1).to(device)


def backward_D_basic(netD, real, fake):
    with torch.autocast(amp_device, dtype=torch.bfloat16):
        pred_real = netD(real)
        loss_D_real = criterionGAN(pred_real, True)
        pred_fake = netD(fake.detach())
        loss_D_fake = criterionGAN(pred_fake, False)
        loss_D = (loss_D_real + loss_D_fake) * 0.5
    loss_D.backward()
    return loss_D


for it in range(ITERS):
    real_A, real_B = load(B, CROP), load(B, CROP)
    with torch.autocast(amp_device, dtype=torch.bfloat16):
        fake_B = netG_A(real_A)
        rec_A = netG_B(fake_B)
        fake_A = netG_B(real_B)
        rec_B = netG_A(fake_A)
    # optimize G
    set_requires_grad([netD_A, netD_B], False)
    optimizer_G.zero_grad()
    with torch.autocast(amp_device, dtype=torch.bfloat16):
        idt_A = netG_A(real_B)
        loss_idt_A = criterionIdt(idt_A, real_B) * LAMBDA_B * LAMBDA_IDT
        idt_B = netG_B(real_A)
        loss_idt_B = criterionIdt(idt_B, real_A) * LAMBDA_A * LAMBDA_IDT
        loss_G_A = criterionGAN(netD_A(fake_B), True)
        loss_G_B = criterionGAN(netD_B(fake_A), True)
        loss_cycle_A = criterionCycle(rec_A, real_A) * LAMBDA_A
        loss_cycle_B = criterionCycle(rec_B, real_B) * LAMBDA_B
        loss_G = loss_G_A + loss_G_B + loss_cycle_A + loss_cycle_B + loss_idt_A + loss_idt_B
    loss_G.backward()
    optimizer_G.step()
    # optimize D
    set_requires_grad([netD_A, netD_B], True)
    optimizer_D.zero_grad()
    loss_D_A = backward_D_basic(netD_A, real_B, fake_B_pool.query(fake_B))
    loss_D_B = backward_D_basic(netD_B, real_A, fake_A_pool.query(fake_A))
    optimizer_D.step()
    print(
        f"iter {it} G {loss_G.item():.3f} D_A {loss_D_A.item():.3f} D_B {loss_D_B.item():.3f}"
        f" cyc {loss_cycle_A.item():.3f} pool {fake_B_pool.num_imgs}"
    )
    if device == "cuda" and it in (0, 2, ITERS - 1):
        print(f"iter {it} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
for s in schedulers:
    s.step()
del real_A, real_B, fake_A, fake_B, rec_A, rec_B, idt_A, idt_B, loss_G, loss_D_A, loss_D_B

netG_A.eval()
netG_B.eval()
visuals = []
with torch.no_grad():
    for _ in range(N_TEST):
        real_A = load(1, TEST_SIZE)
        fake_B = netG_A(real_A)
        rec_A = netG_B(fake_B)
        visuals.append(((torch.cat([real_A, fake_B, rec_A]) + 1) * 127.5).clamp(0, 255).to(torch.uint8).cpu())
print(f"test {len(visuals)} x {tuple(visuals[0].shape)} lr {optimizer_G.param_groups[0]['lr']:.2e}")
if device == "cuda":
    print(f"test peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
