"""Finite Scalar Quantization (Mentzer et al. 2023, "FSQ: VQ-VAE made simple") by hand: a conv
autoencoder whose 4-channel latent is bounded per channel (tanh with the paper's half-level offset for
even levels), rounded with a straight-through estimator and scaled back, levels (8, 5, 5, 5): an implicit
codebook of 1000 codes with no codebook loss, no commitment loss, no EMA. Codes map to integer indices by
a mixed-radix basis (cumprod of the levels) and back with floor division and modulo.

Phases: (1) the autoencoder built (128x128 RGB -> 16x16 latent) with Adam; (2) three training steps at
batch 32 under fp16 autocast with a GradScaler (MSE + L1), reporting codebook usage via bincount;
(3) the dataset tokenized under no_grad (batch 64) and a bidirectional transformer over the 256 indices
trained for three steps in bf16 autocast with MaskGIT's cosine schedule implemented as a rank mask
(argsort of argsort < per-sample count, labels -100 elsewhere) and a learned [MASK] token; (4) parallel
iterative decoding of 48 images in 8 steps (Gumbel-perturbed sampling, confidence sorting, re-masking
the least confident by a threshold gathered from the sorted confidences), the indices turned back into
FSQ codes and decoded to pixels, all under inference_mode with fp16 autocast."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(30503)
device = "cuda" if torch.cuda.is_available() else "cpu"
LEVELS = [8, 5, 5, 5]
B_AE, B_TOK, B_GEN, STEPS_GEN = 32, 64, 48, 8
D, LAYERS, HEADS = 768, 12, 12


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class FSQ(nn.Module):
    def __init__(self, levels):
        super().__init__()
        lv = torch.tensor(levels, dtype=torch.int32)
        self.register_buffer("levels", lv, persistent=False)
        self.register_buffer(
            "basis", torch.cumprod(torch.tensor([1, *levels[:-1]]), 0).int(), persistent=False
        )
        self.codebook_size = int(lv.prod().item())

    def bound(self, z, eps=1e-3):
        half_l = (self.levels - 1) * (1 + eps) / 2
        offset = torch.where(self.levels % 2 == 0, 0.5, 0.0)
        shift = (offset / half_l).atanh()
        return (z + shift).tanh() * half_l - offset

    def forward(self, z):
        """z: (..., 4) -> codes in [-1, 1] with a straight-through round."""
        bounded = self.bound(z)
        rounded = bounded + (bounded.round() - bounded).detach()
        return rounded / (self.levels // 2)

    def codes_to_indices(self, codes):
        half = self.levels // 2
        return ((codes * half + half) * self.basis).sum(dim=-1).long()

    def indices_to_codes(self, idx):
        half = self.levels // 2
        digits = (idx[..., None] // self.basis) % self.levels
        return (digits - half) / half


def down(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 4, 2, 1), nn.GroupNorm(32, cout), nn.SiLU())


def up(cin, cout):
    return nn.Sequential(
        nn.Upsample(scale_factor=2, mode="nearest"),
        nn.Conv2d(cin, cout, 3, 1, 1),
        nn.GroupNorm(32, cout),
        nn.SiLU(),
    )


class FSQAutoencoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(3, 128, 3, 1, 1), down(128, 128), down(128, 256), down(256, 512), nn.Conv2d(512, 4, 1)
        )
        self.fsq = FSQ(LEVELS)
        self.decoder = nn.Sequential(
            nn.Conv2d(4, 512, 3, 1, 1), up(512, 256), up(256, 128), up(128, 128), nn.Conv2d(128, 3, 3, 1, 1)
        )

    def encode(self, x):
        return self.fsq(self.encoder(x).permute(0, 2, 3, 1))

    def decode(self, codes):
        return self.decoder(codes.permute(0, 3, 1, 2))


class TokenTransformer(nn.Module):
    def __init__(self, vocab, length):
        super().__init__()
        self.mask_id = vocab
        self.tok = nn.Embedding(vocab + 1, D)
        self.pos = nn.Parameter(torch.zeros(1, length, D))
        layer = nn.TransformerEncoderLayer(
            D, HEADS, 4 * D, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.out = nn.Linear(D, vocab)

    def forward(self, idx):
        return self.out(self.norm(self.blocks(self.tok(idx) + self.pos)))


ae = FSQAutoencoder().to(device)
opt_ae = torch.optim.Adam(ae.parameters(), lr=2e-4, betas=(0.5, 0.9))
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
report("autoencoder built")

for step in range(3):
    x = torch.rand(B_AE, 3, 128, 128, device=device) * 2 - 1
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        codes = ae.encode(x)
        recon = ae.decode(codes)
        loss = F.mse_loss(recon.float(), x) + 0.1 * F.l1_loss(recon.float(), x)
    opt_ae.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt_ae)
    scaler.update()
    used = torch.bincount(
        ae.fsq.codes_to_indices(codes.detach().float()).flatten(), minlength=ae.fsq.codebook_size
    )
    print(f"ae step {step} loss {loss.item():.4f} codes used {(used > 0).sum().item()}")
del x, codes, recon, loss, used
report("fsq autoencoder fp16 training")

# (3) tokenize + bidirectional transformer
ae.eval()
with torch.no_grad():
    tokens = ae.fsq.codes_to_indices(
        ae.encode(torch.rand(B_TOK, 3, 128, 128, device=device) * 2 - 1)
    ).flatten(1)
N = tokens.shape[1]
net = TokenTransformer(ae.fsq.codebook_size, N).to(device)
opt = torch.optim.AdamW(net.parameters(), lr=1e-4, betas=(0.9, 0.96), weight_decay=0.045, foreach=True)
for step in range(3):
    r = torch.cos(torch.rand(B_TOK, device=device) * math.pi / 2)
    count = (r * N).ceil().clamp(min=1)
    ranks = torch.rand(B_TOK, N, device=device).argsort(-1).argsort(-1)
    mask = ranks < count[:, None]
    inputs = torch.where(mask, torch.full_like(tokens, net.mask_id), tokens)
    labels = torch.where(mask, tokens, torch.full_like(tokens, -100))
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = net(inputs)
        loss = F.cross_entropy(
            logits.view(-1, logits.shape[-1]).float(), labels.view(-1), label_smoothing=0.1
        )
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"transformer step {step} loss {loss.item():.4f}")
del logits, loss, inputs, labels, mask, ranks
report("token transformer bf16 training")

# (4) parallel decoding and pixels
net.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    idx = torch.full((B_GEN, N), net.mask_id, device=device, dtype=torch.long)
    for t in range(STEPS_GEN):
        logits = net(idx).float()
        unknown = idx == net.mask_id
        gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp_min(1e-20)).clamp_min(1e-20))
        sampled = (logits + gumbel).argmax(-1)
        sampled = torch.where(unknown, sampled, idx)
        probs = logits.softmax(-1).gather(-1, sampled[..., None])[..., 0]
        temp = 4.5 * (1 - (t + 1) / STEPS_GEN)
        conf = probs.log() + temp * -torch.log(-torch.log(torch.rand_like(probs).clamp_min(1e-20)))
        conf = torch.where(unknown, conf, torch.full_like(conf, math.inf))
        n_mask = math.floor(math.cos(math.pi / 2 * (t + 1) / STEPS_GEN) * N)
        if n_mask > 0:
            threshold = conf.sort(dim=-1).values[:, n_mask - 1 : n_mask]
            idx = torch.where(conf <= threshold, torch.full_like(sampled, net.mask_id), sampled)
        else:
            idx = sampled
    codes = ae.fsq.indices_to_codes(idx.clamp(max=ae.fsq.codebook_size - 1)).view(B_GEN, 16, 16, len(LEVELS))
    images = ae.decode(codes).clamp(-1, 1)
print(f"generated {tuple(images.shape)} mean {images.float().mean().item():.4f}")
report("parallel decoding and pixels")
