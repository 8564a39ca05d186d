"""A conditional LSGAN after Mao et al. 2017 (Least Squares GANs; the 112 x 112 LSUN architecture of
their Figure 3, with the class conditioning of their Figure 5 by one-hot labels): the generator maps
z (1,024) concatenated with a one-hot label through a Linear to 256 x 7 x 7, then ConvTranspose2d
3 x 3 of stride 2 and 1 alternating (256, 256, 256, 256, 128, 64 channels, BatchNorm, ReLU) to
112 x 112 and a 3 x 3 conv to RGB with tanh; the discriminator of four 5 x 5 stride-2 Conv2d (64,
128, 256, 512; BatchNorm and LeakyReLU 0.2 after the first) with the label's Linear projection to
a 112 x 112 map concatenated to the image as a fourth channel, and a Linear to one score. Least
squares losses with the 0-1 coding (0.5 * mean((D(x) - 1)^2) + 0.5 * mean(D(G(z))^2) for D,
0.5 * mean((D(G(z)) - 1)^2) for G), computed in fp32 from the bf16 autocast forwards. Separate
optimizers as users write them, each with zero_grad(set_to_none=False) (the gradients stay allocated
and are zeroed in place): Adam(fused=True, lr 2e-4, betas (0.5, 0.999)) for G and Adam(foreach, lr
2e-4, betas (0.5, 0.999)) for D; 100 classes; batch 128 with labels from a seeded CPU generator;
2 D updates per G update; iteration 0 its own phase, iterations 1-4 another; then G.eval() and 10
samples of each class under no_grad in batches of 250 (labels one-hot by F.one_hot); then a
checkpoint of both models and both optimizers to an in-memory buffer by torch.save (state_dict to
the host); 4 phases."""

import io
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17306)
if SMALL:
    B, ZDIM, N_CLASSES, W, ITERS, PER_CLASS, SAMPLE_B = 4, 32, 10, 16, 2, 2, 10
else:
    B, ZDIM, N_CLASSES, W, ITERS, PER_CLASS, SAMPLE_B = 128, 1024, 100, 64, 5, 10, 250
D_STEPS = 2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp_device = "cuda" if device == "cuda" else "cpu"


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Sequential(
            nn.Linear(ZDIM + N_CLASSES, 256 * 7 * 7), nn.BatchNorm1d(256 * 7 * 7), nn.ReLU(True)
        )

        def up(cin, cout, stride):
            return [
                nn.ConvTranspose2d(cin, cout, 3, stride, 1, output_padding=stride - 1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(True),
            ]

        self.deconv = nn.Sequential(
            *up(256, 256, 2),
            *up(256, 256, 1),
            *up(256, 256, 2),
            *up(256, 256, 1),
            *up(256, 128, 2),
            *up(128, 64, 2),
            nn.Conv2d(64, 3, 3, 1, 1),
            nn.Tanh(),
        )

    def forward(self, z, onehot):
        h = self.fc(torch.cat([z, onehot], 1)).view(-1, 256, 7, 7)
        return self.deconv(h)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.label_proj = nn.Linear(N_CLASSES, 112 * 112)
        self.conv = nn.Sequential(
            nn.Conv2d(4, W, 5, 2, 2),
            nn.LeakyReLU(0.2, True),
            nn.Conv2d(W, W * 2, 5, 2, 2, bias=False),
            nn.BatchNorm2d(W * 2),
            nn.LeakyReLU(0.2, True),
            nn.Conv2d(W * 2, W * 4, 5, 2, 2, bias=False),
            nn.BatchNorm2d(W * 4),
            nn.LeakyReLU(0.2, True),
            nn.Conv2d(W * 4, W * 8, 5, 2, 2, bias=False),
            nn.BatchNorm2d(W * 8),
            nn.LeakyReLU(0.2, True),
        )
        self.fc = nn.Linear(W * 8 * 7 * 7, 1)

    def forward(self, x, onehot):
        lab = self.label_proj(onehot).view(-1, 1, 112, 112)
        h = self.conv(torch.cat([x, lab], 1))
        return self.fc(h.flatten(1))


G = Generator().to(device)
D = Discriminator().to(device)
optimizer_G = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999), fused=device == "cuda")
optimizer_D = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
data_gen = torch.Generator().manual_seed(17306)
print(f"G {sum(p.numel() for p in G.parameters())} D {sum(p.numel() for p in D.parameters())}")
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

G.train()
D.train()
for it in range(ITERS):
    for _ in range(D_STEPS):
        images = (torch.rand(B, 3, 112, 112, generator=data_gen) * 2 - 1).to(device)
        labels = torch.randint(0, N_CLASSES, (B,), generator=data_gen).to(device)
        onehot = F.one_hot(labels, N_CLASSES).float()
        z = torch.randn(B, ZDIM, device=device)
        optimizer_D.zero_grad(set_to_none=False)
        with torch.autocast(amp_device, dtype=torch.bfloat16):
            with torch.no_grad():
                fake = G(z, onehot)
            d_real = D(images, onehot).float()
            d_fake = D(fake, onehot).float()
        d_loss = 0.5 * torch.mean((d_real - 1) ** 2) + 0.5 * torch.mean(d_fake**2)
        d_loss.backward()
        optimizer_D.step()

    optimizer_G.zero_grad(set_to_none=False)
    labels = torch.randint(0, N_CLASSES, (B,), generator=data_gen).to(device)
    onehot = F.one_hot(labels, N_CLASSES).float()
    z = torch.randn(B, ZDIM, device=device)
    with torch.autocast(amp_device, dtype=torch.bfloat16):
        g_out = D(G(z, onehot), onehot).float()
    g_loss = 0.5 * torch.mean((g_out - 1) ** 2)
    g_loss.backward()
    optimizer_G.step()
    print(f"iter {it} d_loss {d_loss.item():.4f} g_loss {g_loss.item():.4f}")
    if device == "cuda" and it in (0, ITERS - 1):
        print(f"iter {it} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del images, labels, onehot, z, fake, d_real, d_fake, d_loss, g_out, g_loss

G.eval()
samples = []
all_labels = torch.arange(N_CLASSES, device=device).repeat_interleave(PER_CLASS)
with torch.no_grad(), torch.autocast(amp_device, dtype=torch.bfloat16):
    for start in range(0, all_labels.numel(), SAMPLE_B):
        lab = all_labels[start : start + SAMPLE_B]
        z = torch.randn(lab.numel(), ZDIM, device=device)
        img = G(z, F.one_hot(lab, N_CLASSES).float())
        samples.append(((img.float() + 1) * 127.5).clamp(0, 255).to(torch.uint8))
samples = torch.cat(samples)
print(f"samples {tuple(samples.shape)} mean {samples.float().mean().item():.2f}")
if device == "cuda":
    print(f"sample peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

buffer = io.BytesIO()
torch.save(
    {
        "G": G.state_dict(),
        "D": D.state_dict(),
        "optimizer_G": optimizer_G.state_dict(),
        "optimizer_D": optimizer_D.state_dict(),
    },
    buffer,
)
print(f"checkpoint {buffer.tell()} bytes")
if device == "cuda":
    print(f"checkpoint peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
