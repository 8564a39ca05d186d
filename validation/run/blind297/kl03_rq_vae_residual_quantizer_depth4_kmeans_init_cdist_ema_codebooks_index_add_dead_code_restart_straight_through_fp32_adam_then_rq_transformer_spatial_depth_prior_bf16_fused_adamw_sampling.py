"""RQ-VAE + RQ-Transformer (Lee et al. 2022) written by hand. The autoencoder: a conv encoder 64 x 64 ->
8 x 8 x 128 (strided convs + GroupNorm + SiLU residual blocks), a residual quantizer of depth 4 with one
shared 512-entry codebook kept as EMA statistics (buffers `cluster_size`, `embed_avg`, `embed`), and a
mirrored decoder (nearest `F.interpolate` + conv). The codebook is initialised by k-means on the first
batch's encoder outputs (8 Lloyd iterations: `torch.cdist`, `argmin`, `bincount`, `index_add_`), updated each
step by EMA (decay 0.99, Laplace smoothing) from every depth's assignments (`F.one_hot` sums), and dead codes
(EMA count < 1) restarted from random encoder outputs (`torch.randint` rows, `torch.where`). The quantised
latent is the sum over depths, passed with the straight-through estimator; commitment loss 0.25; MSE
reconstruction; fp32 Adam.
Phase 1: k-means initialisation and 5 training steps at batch 64. Phase 2: codes of 256 images extracted in
`no_grad` (8 x 8 x 4 int64), the RQ-Transformer built: a spatial transformer (4 `nn.TransformerEncoderLayer`s,
d 256, causal mask) over the per-position sums of code embeddings shifted by a start token, and a depth
transformer (2 layers) over the position's context + the embeddings of the codes of earlier depths,
predicting the 4 codes of each position; bf16 autocast, fused AdamW, 6 steps at batch 64. Phase 3: sampling
16 images in `inference_mode` under bf16 autocast: 64 positions x 4 depths, the spatial transformer rerun on
the growing prefix (no cache), top-k 64 multinomial sampling at each depth, then the codes decoded to
images. 3 phases."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2973)
dev = "cuda"
K, D, DEPTH, HW = 512, 128, 4, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.block = nn.Sequential(
            nn.GroupNorm(32, c),
            nn.SiLU(),
            nn.Conv2d(c, c, 3, 1, 1),
            nn.GroupNorm(32, c),
            nn.SiLU(),
            nn.Conv2d(c, c, 3, 1, 1),
        )

    def forward(self, x):
        return x + self.block(x)


def encoder():
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, 1, 1),
        ResBlock(64),
        nn.Conv2d(64, 128, 4, 2, 1),
        ResBlock(128),
        nn.Conv2d(128, 256, 4, 2, 1),
        ResBlock(256),
        nn.Conv2d(256, 256, 4, 2, 1),
        ResBlock(256),
        nn.GroupNorm(32, 256),
        nn.SiLU(),
        nn.Conv2d(256, D, 1),
    )


class Up(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, 1, 1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


def decoder():
    return nn.Sequential(
        nn.Conv2d(D, 256, 3, 1, 1),
        ResBlock(256),
        Up(256, 256),
        ResBlock(256),
        Up(256, 128),
        ResBlock(128),
        Up(128, 64),
        ResBlock(64),
        nn.GroupNorm(32, 64),
        nn.SiLU(),
        nn.Conv2d(64, 3, 3, 1, 1),
    )


class ResidualQuantizer(nn.Module):
    def __init__(self, decay=0.99, eps=1e-5):
        super().__init__()
        self.decay, self.eps = decay, eps
        self.register_buffer("embed", torch.randn(K, D))
        self.register_buffer("cluster_size", torch.zeros(K))
        self.register_buffer("embed_avg", torch.zeros(K, D))

    @torch.no_grad()
    def kmeans_init(self, flat, iters=8):
        centers = flat[torch.randperm(flat.shape[0], device=flat.device)[:K]].clone()
        for _ in range(iters):
            assign = torch.cdist(flat, centers).argmin(1)
            counts = torch.bincount(assign, minlength=K).float()
            sums = torch.zeros_like(centers).index_add_(0, assign, flat)
            centers = torch.where(counts[:, None] > 0, sums / counts.clamp(min=1)[:, None], centers)
        self.embed.copy_(centers)
        self.embed_avg.copy_(centers)
        self.cluster_size.fill_(1.0)

    def lookup(self, codes):
        return F.embedding(codes, self.embed).sum(-2)

    def forward(self, z):
        b, c, h, w = z.shape
        flat = z.permute(0, 2, 3, 1).reshape(-1, c)
        residual = flat.detach()
        quant = torch.zeros_like(residual)
        codes, onehots, inputs = [], [], []
        for _ in range(DEPTH):
            dist = (
                residual.pow(2).sum(1, keepdim=True)
                - 2 * residual @ self.embed.t()
                + self.embed.pow(2).sum(1)[None]
            )
            idx = dist.argmin(1)
            q = F.embedding(idx, self.embed)
            codes.append(idx)
            onehots.append(F.one_hot(idx, K).type(residual.dtype))
            inputs.append(residual)
            quant = quant + q
            residual = residual - q
        if self.training:
            with torch.no_grad():
                oh = torch.cat(onehots)
                x = torch.cat(inputs)
                self.cluster_size.mul_(self.decay).add_(oh.sum(0), alpha=1 - self.decay)
                self.embed_avg.mul_(self.decay).add_(oh.t() @ x, alpha=1 - self.decay)
                n = self.cluster_size.sum()
                size = (self.cluster_size + self.eps) / (n + K * self.eps) * n
                self.embed.copy_(self.embed_avg / size[:, None])
                dead = self.cluster_size < 1.0
                rand = flat.detach()[torch.randint(0, flat.shape[0], (K,), device=flat.device)]
                self.embed.copy_(torch.where(dead[:, None], rand, self.embed))
                self.embed_avg.copy_(torch.where(dead[:, None], rand, self.embed_avg))
                self.cluster_size.masked_fill_(dead, 1.0)
        commit = F.mse_loss(flat, quant.detach())
        quant = flat + (quant - flat).detach()
        return (
            quant.reshape(b, h, w, c).permute(0, 3, 1, 2),
            torch.stack(codes, -1).reshape(b, h, w, DEPTH),
            commit,
        )


enc, dec, rq = encoder().to(dev), decoder().to(dev), ResidualQuantizer().to(dev)
opt = torch.optim.Adam(list(enc.parameters()) + list(dec.parameters()), lr=3e-4)
first = torch.rand(64, 3, 64, 64, device=dev) * 2 - 1
with torch.no_grad():
    rq.kmeans_init(enc(first).permute(0, 2, 3, 1).reshape(-1, D))
for step in range(5):
    x = first if step == 0 else torch.rand(64, 3, 64, 64, device=dev) * 2 - 1
    zq, codes, commit = rq(enc(x))
    loss = F.mse_loss(dec(zq), x) + 0.25 * commit
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("rq-vae loss", round(loss.item(), 4), "live codes", int((rq.cluster_size >= 1).sum()))
report("rq_vae_kmeans_init_ema_dead_code_restart_fp32")

del loss, zq, commit, x, first, opt
enc.eval()
rq.eval()
with torch.no_grad():
    all_codes = torch.cat([rq(enc(torch.rand(64, 3, 64, 64, device=dev) * 2 - 1))[1] for _ in range(4)])
all_codes = all_codes.reshape(256, HW * HW, DEPTH)


class RQTransformer(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.tok = nn.Embedding(K, d)
        self.start = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, HW * HW, d))
        self.depth_pos = nn.Parameter(torch.zeros(1, DEPTH, d))

        def layer():
            return nn.TransformerEncoderLayer(
                d, 8, 4 * d, dropout=0.0, batch_first=True, norm_first=True, activation="gelu"
            )

        self.spatial = nn.TransformerEncoder(layer(), 4, enable_nested_tensor=False)
        self.depth = nn.TransformerEncoder(layer(), 2, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, K)

    def context(self, codes):
        b, t, _ = codes.shape
        emb = self.tok(codes).sum(2)
        x = torch.cat([self.start.expand(b, 1, -1), emb], 1)[:, :t] + self.pos[:, :t]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=codes.device)
        return self.spatial(x, mask=mask, is_causal=True)

    def depth_logits(self, ctx, codes):
        b, t, d = ctx.shape
        prev = self.tok(codes[..., :-1]) if codes.shape[-1] > 1 else ctx.new_zeros(b, t, 0, d)
        seq = torch.cat([ctx[:, :, None], prev], 2)
        n = seq.shape[2]
        seq = (seq + self.depth_pos[:, None, :n]).reshape(b * t, n, d)
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=ctx.device)
        h = self.depth(seq, mask=mask, is_causal=True)
        return self.head(self.ln(h)).reshape(b, t, n, K)


prior = RQTransformer().to(dev)
popt = torch.optim.AdamW(prior.parameters(), lr=3e-4, weight_decay=0.01, fused=True)
prior.train()
for _step in range(6):
    batch = all_codes[torch.randint(0, 256, (64,), device=dev)]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = prior.depth_logits(prior.context(batch), batch)
        loss = F.cross_entropy(logits.float().reshape(-1, K), batch.reshape(-1))
    popt.zero_grad(set_to_none=True)
    loss.backward()
    popt.step()
print("rq-transformer loss", round(loss.item(), 4))
report("rq_transformer_spatial_depth_bf16_fused_adamw")

del logits, loss, batch
prior.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    codes = torch.zeros(16, 0, DEPTH, dtype=torch.long, device=dev)
    for _t in range(HW * HW):
        padded = torch.cat([codes, codes.new_zeros(16, 1, DEPTH)], 1)
        ctx = prior.context(padded)[:, -1:]
        pos_codes = codes.new_zeros(16, 1, 0)
        for _ in range(DEPTH):
            lg = prior.depth_logits(ctx, torch.cat([pos_codes, pos_codes.new_zeros(16, 1, 1)], 2))[
                :, 0, -1
            ].float()
            v, _i = lg.topk(64, dim=-1)
            lg = lg.masked_fill(lg < v[:, -1:], float("-inf"))
            nxt = torch.multinomial(lg.softmax(-1), 1)
            pos_codes = torch.cat([pos_codes, nxt[:, None]], 2)
        codes = torch.cat([codes, pos_codes], 1)
    zq = rq.lookup(codes.reshape(16, HW, HW, DEPTH)).permute(0, 3, 1, 2).float()
    images = dec(zq).clamp(-1, 1)
print("sampled", tuple(images.shape), round(images.float().mean().item(), 4))
report("inference_mode_rq_sampling_16_images")
