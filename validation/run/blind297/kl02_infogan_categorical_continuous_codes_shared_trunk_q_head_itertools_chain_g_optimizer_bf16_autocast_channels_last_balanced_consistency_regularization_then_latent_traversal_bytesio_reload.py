"""InfoGAN (Chen et al. 2016) at 64 x 64 with one 10-way categorical code and two continuous codes beside
62 noise dims, as the common PyTorch ports write it: a DCGAN-style generator (ConvTranspose2d + BatchNorm +
ReLU, tanh), a discriminator trunk (strided convs, LeakyReLU, BatchNorm) shared by a real/fake head (4x4
conv logit) and a Q head (conv -> 10 logits for the categorical code, 2 means and 2 log-variances for the
continuous codes). Two Adams: D on trunk + head; G on the generator and the Q head together
(`itertools.chain`), betas (0.5, 0.999). Step order per iteration: D first on real and `fake.detach()`,
then the generator step re-running the trunk on the same (non-detached) fake for both the adversarial
BCE-with-logits loss and the mutual-information loss (cross-entropy on the categorical code + Gaussian NLL
on the continuous codes). Everything under bf16 autocast, models and inputs channels_last.
Phase 1: 6 iterations at batch 128. Phase 2: balanced consistency regularisation (bCR, Zhao et al.)
added to the D step: reals and fakes augmented by a random horizontal flip (`torch.where` over a
per-sample mask) and a random translation (`torch.roll` by up to 4 pixels), the squared distance between
the D logits of the image and its augmentation weighted 10; 5 iterations. Phase 3: latent traversal in
`inference_mode`: for each of the 10 categories, each continuous code swept over 10 values of
`torch.linspace(-2, 2, 10)` with the noise fixed (2 categories x 2 codes x 10 x 5 = 200 images per call of
G, 1,000 in all via 5 calls), images mapped to uint8 and the Q head's predicted categories' accuracy
computed. Phase 4: the generator's `state_dict` saved to an `io.BytesIO` with `torch.save`, the generator
deleted, a fresh one built on the GPU, `load_state_dict(torch.load(buf, map_location="cuda"))`, and 512
samples drawn in eval mode under no_grad. 4 phases."""

import io
import itertools

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2972)
dev = "cuda"
NZ, NCAT, NCONT = 62, 10, 2


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Generator(nn.Module):
    def __init__(self, nf=64):
        super().__init__()
        zin = NZ + NCAT + NCONT
        self.net = nn.Sequential(
            nn.ConvTranspose2d(zin, nf * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(nf * 8),
            nn.ReLU(True),
            nn.ConvTranspose2d(nf * 8, nf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(nf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(nf * 4, nf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(nf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(nf * 2, nf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(nf),
            nn.ReLU(True),
            nn.ConvTranspose2d(nf, 3, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, z):
        return self.net(z[:, :, None, None])


class Trunk(nn.Module):
    def __init__(self, nf=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, nf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.1, True),
            nn.Conv2d(nf, nf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(nf * 2),
            nn.LeakyReLU(0.1, True),
            nn.Conv2d(nf * 2, nf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(nf * 4),
            nn.LeakyReLU(0.1, True),
            nn.Conv2d(nf * 4, nf * 8, 4, 2, 1, bias=False),
            nn.BatchNorm2d(nf * 8),
            nn.LeakyReLU(0.1, True),
        )

    def forward(self, x):
        return self.net(x)


class QHead(nn.Module):
    def __init__(self, nf=64):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(nf * 8, 128, 4, 1, 0, bias=False), nn.BatchNorm2d(128), nn.LeakyReLU(0.1)
        )
        self.cat = nn.Conv2d(128, NCAT, 1)
        self.mu = nn.Conv2d(128, NCONT, 1)
        self.logvar = nn.Conv2d(128, NCONT, 1)

    def forward(self, h):
        h = self.conv(h)
        return self.cat(h).flatten(1), self.mu(h).flatten(1), self.logvar(h).flatten(1)


cl = torch.channels_last
G = Generator().to(dev, memory_format=cl)
trunk = Trunk().to(dev, memory_format=cl)
d_head = nn.Conv2d(512, 1, 4, 1, 0).to(dev, memory_format=cl)
q_head = QHead().to(dev, memory_format=cl)
opt_d = torch.optim.Adam(
    itertools.chain(trunk.parameters(), d_head.parameters()), lr=2e-4, betas=(0.5, 0.999)
)
opt_g = torch.optim.Adam(itertools.chain(G.parameters(), q_head.parameters()), lr=1e-3, betas=(0.5, 0.999))


def sample_codes(b):
    z = torch.randn(b, NZ, device=dev)
    idx = torch.randint(0, NCAT, (b,), device=dev)
    cont = torch.rand(b, NCONT, device=dev) * 2 - 1
    return torch.cat([z, F.one_hot(idx, NCAT).float(), cont], 1), idx, cont


def augment(x):
    flip = torch.rand(x.shape[0], 1, 1, 1, device=dev) < 0.5
    x = torch.where(flip, x.flip(3), x)
    dx, dy = (int(v) for v in torch.randint(-4, 5, (2,)))
    return torch.roll(x, shifts=(dy, dx), dims=(2, 3))


def d_logits(x):
    return d_head(trunk(x)).flatten()


def train(iters, bcr):
    for _ in range(iters):
        real = (torch.rand(128, 3, 64, 64, device=dev) * 2 - 1).contiguous(memory_format=cl)
        codes, idx, cont = sample_codes(128)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            fake = G(codes)
            lr_, lf = d_logits(real), d_logits(fake.detach())
            loss_d = F.binary_cross_entropy_with_logits(
                lr_, torch.ones_like(lr_)
            ) + F.binary_cross_entropy_with_logits(lf, torch.zeros_like(lf))
            if bcr:
                loss_d = loss_d + 10 * ((d_logits(augment(real)) - lr_) ** 2).mean()
                loss_d = loss_d + 10 * ((d_logits(augment(fake.detach())) - lf) ** 2).mean()
        opt_d.zero_grad(set_to_none=True)
        loss_d.backward()
        opt_d.step()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = trunk(fake)
            lg = d_head(h).flatten()
            adv = F.binary_cross_entropy_with_logits(lg, torch.ones_like(lg))
            cat_logits, mu, logvar = q_head(h)
            mi_cat = F.cross_entropy(cat_logits.float(), idx)
            mi_cont = F.gaussian_nll_loss(mu.float(), cont, logvar.float().exp())
            loss_g = adv + mi_cat + 0.1 * mi_cont
        opt_g.zero_grad(set_to_none=True)
        loss_g.backward()
        opt_g.step()
    return loss_d, loss_g


loss_d, loss_g = train(6, bcr=False)
print("infogan d", round(loss_d.item(), 4), "g", round(loss_g.item(), 4))
report("infogan_bf16_channels_last_6_iters")

loss_d, loss_g = train(5, bcr=True)
print("bcr d", round(loss_d.item(), 4), "g", round(loss_g.item(), 4))
report("balanced_consistency_regularisation_5_iters")

del loss_d, loss_g
G.eval()
q_head.eval()
trunk.eval()
correct, images = 0, []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    z = torch.randn(1, NZ, device=dev).expand(200, NZ)
    sweep = torch.linspace(-2, 2, 10, device=dev)
    for start in range(0, NCAT, 2):
        cats = torch.arange(start, start + 2, device=dev).repeat_interleave(100)
        cont = torch.zeros(200, NCONT, device=dev)
        which = torch.arange(200, device=dev) % 100 // 10 % NCONT
        cont[torch.arange(200, device=dev), which] = sweep.repeat(20)
        x = G(torch.cat([z, F.one_hot(cats, NCAT).float(), cont], 1))
        pred = q_head(trunk(x))[0].argmax(1)
        correct += int((pred == cats).sum())
        images.append(((x.float() + 1) * 127.5).clamp(0, 255).to(torch.uint8))
    grid = torch.cat(images)
print("traversal", tuple(grid.shape), "q accuracy", correct / 1000)
report("latent_traversal_inference_mode_1000_images")

del images, grid, x
buf = io.BytesIO()
torch.save(G.state_dict(), buf)
G = None
buf.seek(0)
G2 = Generator().to(dev, memory_format=cl)
G2.load_state_dict(torch.load(buf, map_location="cuda"))
G2.eval()
with torch.no_grad():
    samples = G2(sample_codes(512)[0])
print("reloaded samples", tuple(samples.shape), round(samples.float().std().item(), 4))
report("bytesio_reloaded_generator_512_samples")
