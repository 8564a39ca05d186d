"""VideoGPT (Yan et al. 2021) written by hand at a reduced size. Stage 1, the VQ-VAE: an encoder of strided
Conv3d (kernel 4, stride 2 in time, height and width, twice: 16 x 64 x 64 RGB clips to 4 x 16 x 16),
a Conv3d to 240 channels and 4 attention residual blocks (BatchNorm3d + ReLU + Conv3d k3 + BatchNorm3d +
ReLU + Conv3d k1 + BatchNorm3d + ReLU + axial attention: multi-head SDPA along T, along H and along W
separately, summed), a 1x1x1 pre-quantization conv to 256 dims, a codebook of 2,048 codes with the EMA
update (decay 0.99, Laplace-smoothed cluster sizes, the embedding sums built by one_hot(...).t() @ z)
and the straight-through estimator z + (q - z).detach(), commitment loss 0.25; the decoder mirrors it
with ConvTranspose3d. MSE reconstruction / 0.06 (the data variance) + commitment. fp32, Adam (lr 3e-4),
batch 16: the first step, 3 more steps.

Stage 2, the prior: the codes of 8 batches of 16 clips extracted under no_grad (argmin of the Euclidean
distances through torch.cdist); a GPT over the 1,024 codes of a clip (4 x 16 x 16, flattened, with
learned axial position embeddings summed), 8 layers, width 512, 8 heads, causal SDPA, GELU MLP,
a start token and 16 class labels as a prefix embedding, trained under bf16 autocast with foreach AdamW
(lr 3e-4, betas (0.9, 0.95), weight decay 0.1 on matrices only) and a cosine schedule, 3 steps at batch
32; then sampling: 256 codes per clip for 16 clips under torch.inference_mode with a per-layer KV cache
grown by torch.cat (top-k 100 multinomial), the first 768 codes taken from real clips as a prompt,
and the completed clips decoded by the VQ-VAE. 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18603)
if SMALL:
    B, FR, RES, STEPS, N_EXTRACT, PRIOR_B, PRIOR_STEPS, SAMPLE_B, GEN = 2, 8, 16, 1, 2, 2, 1, 2, 4
    HID, EMB, NCODES, NLAYER, WIDTH = 64, 32, 64, 2, 64
else:
    B, FR, RES, STEPS, N_EXTRACT, PRIOR_B, PRIOR_STEPS, SAMPLE_B, GEN = 16, 16, 64, 3, 8, 32, 3, 16, 256
    HID, EMB, NCODES, NLAYER, WIDTH = 240, 256, 2048, 8, 512
NCLASS = 16
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class AxialAttention(nn.Module):
    def __init__(self, dim, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.ModuleList([nn.Linear(dim, 3 * dim, bias=False) for _ in range(3)])
        self.out = nn.ModuleList([nn.Linear(dim, dim) for _ in range(3)])

    def attend(self, x, axis):
        # x: (B, T, H, W, C); attend along `axis` (1, 2 or 3)
        xa = x.movedim(axis, -2)
        shape = xa.shape
        seq = xa.reshape(-1, shape[-2], shape[-1])
        n, s, c = seq.shape
        q, k, v = self.qkv[axis - 1](seq).view(n, s, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, s, c)
        o = self.out[axis - 1](o).view(shape)
        return o.movedim(-2, axis)

    def forward(self, x):
        x = x.permute(0, 2, 3, 4, 1)
        y = self.attend(x, 1) + self.attend(x, 2) + self.attend(x, 3)
        return y.permute(0, 4, 1, 2, 3)


class AttentionResidualBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.block = nn.Sequential(
            nn.BatchNorm3d(c),
            nn.ReLU(),
            nn.Conv3d(c, c // 2, 3, padding=1, bias=False),
            nn.BatchNorm3d(c // 2),
            nn.ReLU(),
            nn.Conv3d(c // 2, c, 1, bias=False),
            nn.BatchNorm3d(c),
            nn.ReLU(),
        )
        self.attn = AxialAttention(c)

    def forward(self, x):
        h = self.block(x)
        return x + self.attn(h)


class Codebook(nn.Module):
    def __init__(self, n_codes, dim, decay=0.99, eps=1e-5):
        super().__init__()
        self.decay, self.eps, self.n_codes = decay, eps, n_codes
        self.register_buffer("embeddings", torch.randn(n_codes, dim))
        self.register_buffer("cluster_size", torch.zeros(n_codes))
        self.register_buffer("embed_sum", self.embeddings.clone())

    def codes(self, flat):
        return torch.cdist(flat, self.embeddings).argmin(dim=1)

    def forward(self, z):
        b, c, t, h, w = z.shape
        flat = z.permute(0, 2, 3, 4, 1).reshape(-1, c)
        dist = (
            flat.pow(2).sum(1, keepdim=True)
            - 2 * flat @ self.embeddings.t()
            + self.embeddings.pow(2).sum(1)[None]
        )
        idx = dist.argmin(dim=1)
        onehot = F.one_hot(idx, self.n_codes).type_as(flat)
        q = F.embedding(idx, self.embeddings).view(b, t, h, w, c).permute(0, 4, 1, 2, 3)
        commitment = 0.25 * F.mse_loss(z, q.detach())
        if self.training:
            with torch.no_grad():
                self.cluster_size.mul_(self.decay).add_(onehot.sum(0), alpha=1 - self.decay)
                self.embed_sum.mul_(self.decay).add_(onehot.t() @ flat, alpha=1 - self.decay)
                n = self.cluster_size.sum()
                size = (self.cluster_size + self.eps) / (n + self.n_codes * self.eps) * n
                self.embeddings.copy_(self.embed_sum / size[:, None])
        q = z + (q - z).detach()
        perplexity = torch.exp(-(onehot.mean(0) * torch.log(onehot.mean(0) + 1e-10)).sum())
        return q, idx.view(b, t, h, w), commitment, perplexity


class VQVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv3d(3, HID, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv3d(HID, HID, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv3d(HID, HID, 3, padding=1),
            *[AttentionResidualBlock(HID) for _ in range(4)],
            nn.BatchNorm3d(HID),
            nn.ReLU(),
        )
        self.pre_vq = nn.Conv3d(HID, EMB, 1)
        self.codebook = Codebook(NCODES, EMB)
        self.post_vq = nn.Conv3d(EMB, HID, 1)
        self.decoder = nn.Sequential(
            *[AttentionResidualBlock(HID) for _ in range(4)],
            nn.BatchNorm3d(HID),
            nn.ReLU(),
            nn.ConvTranspose3d(HID, HID, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.ConvTranspose3d(HID, 3, 4, stride=2, padding=1),
        )

    def encode(self, x):
        return self.pre_vq(self.encoder(x))

    def decode_codes(self, idx):
        q = F.embedding(idx, self.codebook.embeddings).permute(0, 4, 1, 2, 3)
        return self.decoder(self.post_vq(q))

    def forward(self, x):
        q, _, commitment, perplexity = self.codebook(self.encode(x))
        return self.decoder(self.post_vq(q)), commitment, perplexity


def clips(n):
    return torch.rand(n, 3, FR, RES, RES, device=device) - 0.5


vqvae = VQVAE().to(device)
print(f"vqvae params {sum(p.numel() for p in vqvae.parameters()) / 1e6:.1f}M")
opt = torch.optim.Adam(vqvae.parameters(), lr=3e-4)
if device == "cuda":
    print(f"vqvae {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

vqvae.train()
for step in range(STEPS + 1):
    x = clips(B)
    rec, commitment, perplexity = vqvae(x)
    recon = F.mse_loss(rec, x) / 0.06
    loss = recon + commitment
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(
        f"vq step {step} recon {recon.item():.4f} commit {commitment.item():.4f}"
        f" perplexity {perplexity.item():.1f}"
    )
    if step == 0 and device == "cuda":
        print(
            f"vq first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
del x, rec, commitment, perplexity, recon, loss
if device == "cuda":
    print(f"vq train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

vqvae.eval()
codes, labels = [], []
with torch.no_grad():
    for _ in range(N_EXTRACT):
        z = vqvae.encode(clips(B))
        flat = z.permute(0, 2, 3, 4, 1).reshape(-1, EMB)
        codes.append(vqvae.codebook.codes(flat).view(B, -1))
        labels.append(torch.randint(0, NCLASS, (B,), device=device))
codes = torch.cat(codes)
labels = torch.cat(labels)
LAT = (FR // 4, RES // 4, RES // 4)
SEQ = codes.shape[1]
print(f"codes {tuple(codes.shape)} used {codes.unique().numel()}")
del z, flat
if device == "cuda":
    print(f"extract peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, cache=None):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        o = F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[2] > 1)
        x = x + self.proj(o.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


class VideoPrior(nn.Module):
    def __init__(self, n_codes, d, layers, heads=8):
        super().__init__()
        self.tok = nn.Embedding(n_codes, d)
        self.cls = nn.Embedding(NCLASS, d)
        self.sos = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_t = nn.Parameter(torch.randn(LAT[0], 1, 1, d) * 0.02)
        self.pos_h = nn.Parameter(torch.randn(1, LAT[1], 1, d) * 0.02)
        self.pos_w = nn.Parameter(torch.randn(1, 1, LAT[2], d) * 0.02)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, n_codes, bias=False)

    def pos(self):
        return (self.pos_t + self.pos_h + self.pos_w).reshape(-1, self.sos.shape[-1])

    def forward(self, idx, y, start=0, caches=None):
        b = idx.shape[0]
        x = self.tok(idx)
        if start == 0:
            x = torch.cat([self.sos.expand(b, 1, -1) + self.cls(y)[:, None], x], dim=1)
        x = x + self.pos()[start : start + x.shape[1]]
        for i, blk in enumerate(self.blocks):
            x = blk(x, None if caches is None else caches[i])
        return self.head(self.ln_f(x))


del opt
prior = VideoPrior(NCODES, WIDTH, NLAYER).to(device)
decay = [p for n, p in prior.named_parameters() if p.dim() == 2 and "pos" not in n]
no_decay = [p for n, p in prior.named_parameters() if not (p.dim() == 2 and "pos" not in n)]
popt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-4,
    betas=(0.9, 0.95),
    foreach=True,
)
sched = torch.optim.lr_scheduler.LambdaLR(popt, lambda s: 0.5 * (1 + math.cos(math.pi * s / 1000)))
print(f"prior params {sum(p.numel() for p in prior.parameters()) / 1e6:.1f}M")
prior.train()
for step in range(PRIOR_STEPS):
    sel = torch.randint(0, codes.shape[0], (PRIOR_B,), device=device)
    seq, y = codes[sel], labels[sel]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = prior(seq[:, :-1], y)
    loss = F.cross_entropy(logits.float().view(-1, NCODES), seq.view(-1))
    popt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(prior.parameters(), 1.0)
    popt.step()
    sched.step()
    print(f"prior step {step} loss {loss.item():.4f}")
del logits, loss
if device == "cuda":
    print(f"prior train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

prior.eval()
with torch.inference_mode():
    prompt = codes[:SAMPLE_B, : SEQ - GEN]
    y = labels[:SAMPLE_B]
    caches = [{} for _ in prior.blocks]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = prior(prompt, y, caches=caches)[:, -1].float()
    out = [prompt]
    for i in range(GEN):
        v, ix = logits.topk(100 if not SMALL else 8, dim=-1)
        probs = F.softmax(v, dim=-1)
        nxt = ix.gather(1, torch.multinomial(probs, 1))
        out.append(nxt)
        if i + 1 < GEN:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                logits = prior(nxt, y, start=SEQ - GEN + i + 1, caches=caches)[:, -1].float()
    full = torch.cat(out, dim=1).view(SAMPLE_B, *LAT)
    video = vqvae.decode_codes(full).clamp(-0.5, 0.5)
    video = ((video + 0.5) * 255).to(torch.uint8).cpu()
print(f"sampled video {tuple(video.shape)}")
if device == "cuda":
    print(
        f"sample allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
