"""Conv-TasNet speech separation written by hand: a 16-sample strided Conv1d encoder, 3 repeats of 8
dilated depthwise-separable temporal blocks with PReLU and global layer norm (GroupNorm(1, C)),
sigmoid masks for 2 speakers, a ConvTranspose1d decoder, the negative SI-SNR under the best of the
2 permutations, fp32, Adam, batch 8 of 4 s at 16 kHz, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4705)
N, BN, H, X, R = (16, 8, 16, 2, 1) if SMALL else (512, 128, 512, 8, 3)
B, T = (2, 800) if SMALL else (8, 64000)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self, dilation):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(BN, H, 1),
            nn.PReLU(),
            nn.GroupNorm(1, H),
            nn.Conv1d(H, H, 3, padding=dilation, dilation=dilation, groups=H),
            nn.PReLU(),
            nn.GroupNorm(1, H),
        )
        self.res = nn.Conv1d(H, BN, 1)
        self.skip = nn.Conv1d(H, BN, 1)

    def forward(self, x):
        y = self.net(x)
        return x + self.res(y), self.skip(y)


class ConvTasNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, N, 16, stride=8, bias=False)
        self.norm = nn.GroupNorm(1, N)
        self.bottleneck = nn.Conv1d(N, BN, 1)
        self.blocks = nn.ModuleList([Block(2**x) for _ in range(R) for x in range(X)])
        self.mask = nn.Sequential(nn.PReLU(), nn.Conv1d(BN, 2 * N, 1))
        self.decoder = nn.ConvTranspose1d(N, 1, 16, stride=8, bias=False)

    def forward(self, mix):
        w = torch.relu(self.encoder(mix.unsqueeze(1)))
        x = self.bottleneck(self.norm(w))
        skips = 0
        for block in self.blocks:
            x, s = block(x)
            skips = skips + s
        masks = torch.sigmoid(self.mask(skips)).view(mix.shape[0], 2, N, -1)
        out = self.decoder((w.unsqueeze(1) * masks).flatten(0, 1))
        return out.view(mix.shape[0], 2, -1)


def si_snr(est, ref):
    est = est - est.mean(-1, keepdim=True)
    ref = ref - ref.mean(-1, keepdim=True)
    proj = (est * ref).sum(-1, keepdim=True) * ref / (ref.pow(2).sum(-1, keepdim=True) + 1e-8)
    noise = est - proj
    return 10 * torch.log10(proj.pow(2).sum(-1) / (noise.pow(2).sum(-1) + 1e-8) + 1e-8)


model = ConvTasNet().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    sources = torch.randn(B, 2, T, device=device)
    est = model(sources.sum(1))
    est = est[..., : sources.shape[-1]]
    a = si_snr(est, sources).mean(-1)
    b = si_snr(est.flip(1), sources).mean(-1)
    loss = -torch.maximum(a, b).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del sources, est, a, b, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
