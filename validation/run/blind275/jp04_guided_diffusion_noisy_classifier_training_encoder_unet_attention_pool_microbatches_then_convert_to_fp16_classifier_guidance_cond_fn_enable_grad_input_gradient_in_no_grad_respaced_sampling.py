"""Classifier guidance the way openai/guided-diffusion does it ("Diffusion Models Beat GANs on Image
Synthesis"): classifier_train.py trains a noise-aware classifier, classifier_sample.py samples a
class-conditional diffusion model whose posterior mean is shifted by the classifier's input gradient. Written
by hand after the repo's unet.py / gaussian_diffusion.py / respace.py, at 128 x 128 with random weights:
- the diffusion model: a class-conditional UNet (channels 128, multipliers 1, 1, 2, 3, 4, 2 residual blocks a
  level, `use_scale_shift_norm`, attention with 64-channel heads at 32, 16 and 8 by the legacy einsum
  `QKVAttentionLegacy`, learned sigma: 6 output channels), `convert_to_fp16()` (convolutions in fp16, the
  time/label embeddings and the GroupNorm32 statistics in fp32, `h = x.type(self.dtype)`);
- the classifier: the `EncoderUNetModel` (the same down path and middle block, channels 128) with the
  "attention" pooling head (`AttentionPool2d`, a learned positional embedding, 1,000 classes). The schedule:
  linear betas over 1,000 steps in float64 numpy, indexed per call by
  `th.from_numpy(arr).to(device)[timesteps].float()` (`_extract_into_tensor`). Phase 0: both networks. Phase
  1: classifier_train.py's loop in fp32: 4 AdamW steps (lr 3e-4, weight decay 0.05) of 64 noised images
  (`q_sample` at uniformly drawn t), split into 2 micro-batches of 32, each backward accumulated, the
  classifier's logits under cross-entropy. Phase 2: the classifier converted to fp16, then `p_sample_loop`
  over 25 respaced steps (every 40th of the 1,000, the new betas from the kept alphas_cumprod as respace.py
  makes them, a `timestep_map` tensor made per call) for 16 images and labels under no_grad: at each step the
  fp16 UNet's learned-range variance and x0 prediction (clipped), and `cond_fn` -- `with th.enable_grad():
  x_in = x.detach().requires_grad_(True)`, `log_softmax` of the classifier's logits, the selected labels'
  log-probabilities summed and `th.autograd.grad(..., x_in)[0] * 1.0` -- added to the mean as `mean.float() +
  variance * gradient.float()`. Seeded; no value-dependent sizes. 2 phases and the end."""

import math

import numpy as np
import torch as th
import torch.nn.functional as F
from torch import nn

th.manual_seed(2754)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {th.cuda.max_memory_allocated()} alloc {th.cuda.memory_allocated()} "
        f"reserved {th.cuda.memory_reserved()}"
    )
    th.cuda.reset_peak_memory_stats()


RES, CH, MULT, NRES, ATTN_RES, HEAD_CH, NCLS = 128, 128, (1, 1, 2, 3, 4), 2, (32, 16, 8), 64, 1000


class GroupNorm32(nn.GroupNorm):
    def forward(self, x):
        return super().forward(x.float()).type(x.dtype)


def normalization(c):
    return GroupNorm32(32, c)


def zero_module(m):
    for p in m.parameters():
        p.detach().zero_()
    return m


def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = th.exp(-math.log(max_period) * th.arange(0, half, dtype=th.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return th.cat([th.cos(args), th.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, ch, emb_ch, out_ch):
        super().__init__()
        self.in_layers = nn.Sequential(normalization(ch), nn.SiLU(), nn.Conv2d(ch, out_ch, 3, padding=1))
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_ch, 2 * out_ch))
        self.out_norm = normalization(out_ch)
        self.out_rest = nn.Sequential(nn.SiLU(), zero_module(nn.Conv2d(out_ch, out_ch, 3, padding=1)))
        self.skip = nn.Identity() if ch == out_ch else nn.Conv2d(ch, out_ch, 1)

    def forward(self, x, emb):
        h = self.in_layers(x)
        emb_out = self.emb_layers(emb).type(h.dtype)[..., None, None]
        scale, shift = th.chunk(emb_out, 2, dim=1)
        h = self.out_norm(h) * (1 + scale) + shift
        return self.skip(x) + self.out_rest(h)


class QKVAttentionLegacy(nn.Module):
    def __init__(self, n_heads):
        super().__init__()
        self.n_heads = n_heads

    def forward(self, qkv):
        bs, width, length = qkv.shape
        ch = width // (3 * self.n_heads)
        q, k, v = qkv.reshape(bs * self.n_heads, ch * 3, length).split(ch, dim=1)
        scale = 1 / math.sqrt(math.sqrt(ch))
        weight = th.einsum("bct,bcs->bts", q * scale, k * scale)
        weight = th.softmax(weight.float(), dim=-1).type(weight.dtype)
        a = th.einsum("bts,bcs->bct", weight, v)
        return a.reshape(bs, -1, length)


class AttentionBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.norm = normalization(ch)
        self.qkv = nn.Conv1d(ch, ch * 3, 1)
        self.attention = QKVAttentionLegacy(ch // HEAD_CH)
        self.proj_out = zero_module(nn.Conv1d(ch, ch, 1))

    def forward(self, x, emb=None):
        b, c, *spatial = x.shape
        x = x.reshape(b, c, -1)
        h = self.proj_out(self.attention(self.qkv(self.norm(x))))
        return (x + h).reshape(b, c, *spatial)


class Downsample(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.op = nn.Conv2d(ch, ch, 3, stride=2, padding=1)

    def forward(self, x, emb=None):
        return self.op(x)


class Upsample(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x, emb=None):
        return self.conv(F.interpolate(x, scale_factor=2, mode="nearest"))


class Seq(nn.ModuleList):
    def forward(self, x, emb):
        for layer in self:
            x = layer(x, emb) if isinstance(layer, ResBlock) else layer(x)
        return x


def convert_module_to_f16(m):
    if isinstance(m, (nn.Conv1d, nn.Conv2d)):
        m.weight.data = m.weight.data.half()
        if m.bias is not None:
            m.bias.data = m.bias.data.half()


def build_down(emb_ch):
    blocks = nn.ModuleList([Seq([nn.Conv2d(3, CH, 3, padding=1)])])
    chans, ch, res = [CH], CH, RES
    for level, mult in enumerate(MULT):
        for _ in range(NRES):
            layers = [ResBlock(ch, emb_ch, mult * CH)]
            ch = mult * CH
            if res in ATTN_RES:
                layers.append(AttentionBlock(ch))
            blocks.append(Seq(layers))
            chans.append(ch)
        if level != len(MULT) - 1:
            blocks.append(Seq([Downsample(ch)]))
            chans.append(ch)
            res //= 2
    middle = Seq([ResBlock(ch, emb_ch, ch), AttentionBlock(ch), ResBlock(ch, emb_ch, ch)])
    return blocks, middle, chans, ch


class UNetModel(nn.Module):
    def __init__(self):
        super().__init__()
        emb_ch = CH * 4
        self.dtype = th.float32
        self.time_embed = nn.Sequential(nn.Linear(CH, emb_ch), nn.SiLU(), nn.Linear(emb_ch, emb_ch))
        self.label_emb = nn.Embedding(NCLS, emb_ch)
        self.input_blocks, self.middle_block, chans, ch = build_down(emb_ch)
        self.output_blocks = nn.ModuleList()
        res = RES // 2 ** (len(MULT) - 1)
        for level, mult in list(enumerate(MULT))[::-1]:
            for i in range(NRES + 1):
                layers = [ResBlock(ch + chans.pop(), emb_ch, CH * mult)]
                ch = CH * mult
                if res in ATTN_RES:
                    layers.append(AttentionBlock(ch))
                if level and i == NRES:
                    layers.append(Upsample(ch))
                    res *= 2
                self.output_blocks.append(Seq(layers))
        self.out = nn.Sequential(normalization(ch), nn.SiLU(), zero_module(nn.Conv2d(ch, 6, 3, padding=1)))

    def convert_to_fp16(self):
        self.input_blocks.apply(convert_module_to_f16)
        self.middle_block.apply(convert_module_to_f16)
        self.output_blocks.apply(convert_module_to_f16)
        self.dtype = th.float16

    def forward(self, x, timesteps, y):
        emb = self.time_embed(timestep_embedding(timesteps, CH)) + self.label_emb(y)
        hs = []
        h = x.type(self.dtype)
        for module in self.input_blocks:
            h = module(h, emb)
            hs.append(h)
        h = self.middle_block(h, emb)
        for module in self.output_blocks:
            h = module(th.cat([h, hs.pop()], dim=1), emb)
        return self.out(h.type(x.dtype))


class AttentionPool2d(nn.Module):
    def __init__(self, spacial_dim, embed_dim, output_dim):
        super().__init__()
        self.positional_embedding = nn.Parameter(th.randn(embed_dim, spacial_dim**2 + 1) / embed_dim**0.5)
        self.qkv_proj = nn.Conv1d(embed_dim, 3 * embed_dim, 1)
        self.c_proj = nn.Conv1d(embed_dim, output_dim, 1)
        self.attention = QKVAttentionLegacy(embed_dim // HEAD_CH)

    def forward(self, x):
        b, c, *_ = x.shape
        x = x.reshape(b, c, -1)
        x = th.cat([x.mean(dim=-1, keepdim=True), x], dim=-1)
        x = x + self.positional_embedding[None, :, :].to(x.dtype)
        x = self.c_proj(self.attention(self.qkv_proj(x)))
        return x[:, :, 0]


class EncoderUNetModel(nn.Module):
    def __init__(self):
        super().__init__()
        emb_ch = CH * 4
        self.dtype = th.float32
        self.time_embed = nn.Sequential(nn.Linear(CH, emb_ch), nn.SiLU(), nn.Linear(emb_ch, emb_ch))
        self.input_blocks, self.middle_block, _, ch = build_down(emb_ch)
        self.out_norm = nn.Sequential(normalization(ch), nn.SiLU())
        self.pool = AttentionPool2d(RES // 2 ** (len(MULT) - 1), ch, NCLS)

    def convert_to_fp16(self):
        self.input_blocks.apply(convert_module_to_f16)
        self.middle_block.apply(convert_module_to_f16)
        self.dtype = th.float16

    def forward(self, x, timesteps):
        emb = self.time_embed(timestep_embedding(timesteps, CH))
        h = x.type(self.dtype)
        for module in self.input_blocks:
            h = module(h, emb)
        h = self.middle_block(h, emb)
        h = self.out_norm(h).type(x.dtype)
        return self.pool(h)


def _extract_into_tensor(arr, timesteps, broadcast_shape):
    res = th.from_numpy(arr).to(device=timesteps.device)[timesteps].float()
    while len(res.shape) < len(broadcast_shape):
        res = res[..., None]
    return res.expand(broadcast_shape)


class Diffusion:
    def __init__(self, betas):
        self.betas = betas
        self.num_timesteps = len(betas)
        alphas = 1.0 - betas
        self.alphas_cumprod = np.cumprod(alphas, axis=0)
        self.alphas_cumprod_prev = np.append(1.0, self.alphas_cumprod[:-1])
        self.sqrt_alphas_cumprod = np.sqrt(self.alphas_cumprod)
        self.sqrt_one_minus_alphas_cumprod = np.sqrt(1.0 - self.alphas_cumprod)
        self.sqrt_recip_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod)
        self.sqrt_recipm1_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod - 1)
        self.posterior_variance = betas * (1.0 - self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)
        self.posterior_log_variance_clipped = np.log(
            np.append(self.posterior_variance[1], self.posterior_variance[1:])
        )
        self.posterior_mean_coef1 = betas * np.sqrt(self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)
        self.posterior_mean_coef2 = (
            (1.0 - self.alphas_cumprod_prev) * np.sqrt(alphas) / (1.0 - self.alphas_cumprod)
        )

    def q_sample(self, x_start, t, noise):
        return (
            _extract_into_tensor(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start
            + _extract_into_tensor(self.sqrt_one_minus_alphas_cumprod, t, x_start.shape) * noise
        )


def linear_betas(n):
    scale = 1000 / n
    return np.linspace(scale * 0.0001, scale * 0.02, n, dtype=np.float64)


class SpacedDiffusion(Diffusion):
    def __init__(self, base_betas, use_timesteps):
        base = Diffusion(base_betas)
        last, new_betas, self.timestep_map = 1.0, [], []
        for i, ac in enumerate(base.alphas_cumprod):
            if i in use_timesteps:
                new_betas.append(1 - ac / last)
                last = ac
                self.timestep_map.append(i)
        super().__init__(np.array(new_betas))

    def wrap(self, fn):
        def wrapped(x, ts, **kw):
            map_tensor = th.tensor(self.timestep_map, device=ts.device, dtype=ts.dtype)
            return fn(x, map_tensor[ts], **kw)

        return wrapped

    def p_mean_variance(self, model, x, t, y):
        c = x.shape[1]
        out = model(x, t, y=y)
        eps, var_values = th.split(out, c, dim=1)
        min_log = _extract_into_tensor(self.posterior_log_variance_clipped, t, x.shape)
        max_log = _extract_into_tensor(np.log(self.betas), t, x.shape)
        frac = (var_values + 1) / 2
        log_var = frac * max_log + (1 - frac) * min_log
        var = th.exp(log_var)
        x0 = (
            _extract_into_tensor(self.sqrt_recip_alphas_cumprod, t, x.shape) * x
            - _extract_into_tensor(self.sqrt_recipm1_alphas_cumprod, t, x.shape) * eps
        ).clamp(-1, 1)
        mean = (
            _extract_into_tensor(self.posterior_mean_coef1, t, x.shape) * x0
            + _extract_into_tensor(self.posterior_mean_coef2, t, x.shape) * x
        )
        return mean, var, log_var

    def p_sample_loop(self, model, cond_fn, shape, y, generator):
        img = th.randn(*shape, device=dev, generator=generator)
        model, cond_fn = self.wrap(model), self.wrap(cond_fn)
        for i in reversed(range(self.num_timesteps)):
            t = th.tensor([i] * shape[0], device=dev)
            with th.no_grad():
                mean, var, log_var = self.p_mean_variance(model, img, t, y)
                gradient = cond_fn(img, t, y=y)
                mean = mean.float() + var * gradient.float()
                noise = th.randn(*shape, device=dev, generator=generator)
                nonzero = (t != 0).float().view(-1, 1, 1, 1)
                img = mean + nonzero * th.exp(0.5 * log_var) * noise
        return img


model = UNetModel().to(dev)
model.convert_to_fp16()
model.eval()
classifier = EncoderUNetModel().to(dev)
print(
    sum(p.numel() for p in model.parameters()),
    "unet",
    sum(p.numel() for p in classifier.parameters()),
    "classifier",
)
base_betas = linear_betas(1000)
diffusion = Diffusion(base_betas)
gen = th.Generator(device=dev).manual_seed(2754)
report("fp16_unet_and_fp32_classifier_built")

opt = th.optim.AdamW(classifier.parameters(), lr=3e-4, weight_decay=0.05)
classifier.train()
for step in range(4):
    batch = th.rand(64, 3, RES, RES, device=dev, generator=gen) * 2 - 1
    labels = th.randint(0, NCLS, (64,), device=dev, generator=gen)
    t = th.randint(0, 1000, (64,), device=dev, generator=gen)
    batch = diffusion.q_sample(batch, t, th.randn(batch.shape, device=dev, generator=gen))
    opt.zero_grad()
    for sub_batch, sub_labels, sub_t in zip(batch.split(32), labels.split(32), t.split(32), strict=True):
        logits = classifier(sub_batch, timesteps=sub_t)
        loss = F.cross_entropy(logits, sub_labels, reduction="none").mean()
        (loss * len(sub_batch) / len(batch)).backward()
    opt.step()
    print(step, round(loss.item(), 4))
report("classifier_train_4_steps_64_in_2_microbatches")

del opt
classifier.convert_to_fp16()
classifier.eval()
CLASSIFIER_SCALE = 1.0


def cond_fn(x, t, y=None):
    with th.enable_grad():
        x_in = x.detach().requires_grad_(True)
        logits = classifier(x_in, t)
        log_probs = F.log_softmax(logits, dim=-1)
        selected = log_probs[range(len(logits)), y.view(-1)]
        return th.autograd.grad(selected.sum(), x_in)[0] * CLASSIFIER_SCALE


sampler = SpacedDiffusion(base_betas, set(range(0, 1000, 40)))
y = th.randint(0, NCLS, (16,), device=dev, generator=gen)
sample = sampler.p_sample_loop(model, cond_fn, (16, 3, RES, RES), y, gen)
sample = ((sample + 1) * 127.5).clamp(0, 255).to(th.uint8)
print("sample", tuple(sample.shape), int(sample.float().mean().item()))
report("classifier_guided_sampling_25_steps_16_images")
print("done")
