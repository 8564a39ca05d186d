"""A TopK sparse autoencoder trained on a language model's residual stream the way openai/sparse_autoencoder's
train.py trains its `FastAutoencoder` ("Scaling and evaluating sparse autoencoders", Gao et al. 2024), with
its Triton sparse kernels replaced by a hand-written `torch.autograd.Function` doing the same sums in torch.
The activations come from a frozen random GPT (6 layers of d 1,024, 16 heads, vocabulary 32,000) run in bf16
under no_grad on seeded synthetic tokens, the residual stream after layer 4 taken by a forward hook and cast
to fp32 (16 x 512 = 8,192 tokens a step). The autoencoder: 131,072 latents on d 1,024, encoder initialised as
the decoder's transpose, the decoder's columns kept at unit norm (`unit_norm_decoder_`), a pre-bias
initialised to the geometric median of a first batch (Weiszfeld iterations), a latent bias; forward:
`F.linear(x - pre_bias, W_enc, latent_bias)` over all 131,072 latents in fp32, `torch.topk(k=32)`, the
dead-latent statistics (`zeros_like(stats_last_nonzero).scatter_add_` of the fired latents, a long buffer),
the AuxK branch (`x.data *= dead_mask` in place on the pre-activations, then `topk(k=256)` of the dead
latents), ReLU, and the sparse decode: `W_dec.T[inds] * vals` summed (forward) with a backward that returns
the values' gradient by a gather and the decoder's gradient by `index_add_` into a zero (131,072, 1,024)
buffer. Loss: normalised MSE plus 1/32 of the AuxK normalised MSE on the residual (`x - recons.detach() +
pre_bias.detach()`). After the backward the decoder gradient's component parallel to each column is removed
(`grad -= einsum("bn,bn->n", W, grad) * W`), Adam (lr 2e-4, eps 6.25e-10) steps and the columns are
renormalised. Phase 0: the GPT and the autoencoder. Phase 1: the geometric median and 6 training steps. Phase
2: an inference_mode evaluation of 4 x 8,192 tokens through the dense path (`zeros_like(pre).scatter_(-1,
topk.indices, relu(values))` then `decoder(latents)`), the fraction of variance unexplained and the dead
fraction. Seeded; no value-dependent sizes. 2 phases and the end."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2753)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


VOCAB, D, LAYERS, HEADS = 32000, 1024, 6, 16
N_DIRS, K, AUXK, DEAD_STEPS = 131072, 32, 256, 4
B, T = 16, 512


class GPTBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.wpe = nn.Embedding(1024, D)
        self.h = nn.ModuleList(GPTBlock() for _ in range(LAYERS))

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        return x


class SparseDecode(torch.autograd.Function):
    """recons[n] = sum_j vals[n, j] * W[:, inds[n, j]] (openai's TritonDecoderAutograd, in torch)."""

    @staticmethod
    def forward(ctx, inds, vals, weight):
        ctx.save_for_backward(inds, vals, weight)
        rows = weight.T[inds]  # (N, k, d)
        return (rows * vals[..., None]).sum(1)

    @staticmethod
    def backward(ctx, grad_out):
        inds, vals, weight = ctx.saved_tensors
        grad_vals = torch.einsum("nd,nkd->nk", grad_out, weight.T[inds])
        grad_wt = torch.zeros(weight.shape[1], weight.shape[0], device=weight.device, dtype=weight.dtype)
        grad_wt.index_add_(0, inds.flatten(), (vals[..., None] * grad_out[:, None]).flatten(0, 1))
        return None, grad_vals, grad_wt.T


class FastAutoencoder(nn.Module):
    def __init__(self, n_dirs, d_model, k, auxk, dead_steps_threshold):
        super().__init__()
        self.k, self.auxk = k, auxk
        self.pre_bias = nn.Parameter(torch.zeros(d_model))
        self.encoder = nn.Linear(d_model, n_dirs, bias=False)
        self.latent_bias = nn.Parameter(torch.zeros(n_dirs))
        self.decoder = nn.Linear(n_dirs, d_model, bias=False)
        self.register_buffer("stats_last_nonzero", torch.zeros(n_dirs, dtype=torch.long))
        self.dead_steps_threshold = dead_steps_threshold

    def auxk_mask_fn(self, x):
        dead_mask = self.stats_last_nonzero > self.dead_steps_threshold
        x.data *= dead_mask  # in place, to save memory (train.py)
        return x

    def forward(self, x):
        x = x - self.pre_bias
        latents_pre_act = F.linear(x, self.encoder.weight, self.latent_bias)
        vals, inds = torch.topk(latents_pre_act, k=self.k, dim=-1)
        tmp = torch.zeros_like(self.stats_last_nonzero)
        tmp.scatter_add_(0, inds.reshape(-1), (vals > 1e-3).to(tmp.dtype).reshape(-1))
        self.stats_last_nonzero *= 1 - tmp.clamp(max=1)
        self.stats_last_nonzero += 1
        auxk_vals, auxk_inds = torch.topk(self.auxk_mask_fn(latents_pre_act), k=self.auxk, dim=-1)
        vals = torch.relu(vals)
        auxk_vals = torch.relu(auxk_vals)
        recons = self.decode_sparse(inds, vals)
        return recons, auxk_inds, auxk_vals

    def decode_sparse(self, inds, vals):
        return SparseDecode.apply(inds, vals, self.decoder.weight) + self.pre_bias

    def dense(self, x):
        pre = F.linear(x - self.pre_bias, self.encoder.weight, self.latent_bias)
        top = torch.topk(pre, k=self.k, dim=-1)
        latents = torch.zeros_like(pre)
        latents.scatter_(-1, top.indices, torch.relu(top.values))
        return self.decoder(latents) + self.pre_bias, latents


def unit_norm_decoder_(ae):
    ae.decoder.weight.data /= ae.decoder.weight.data.norm(dim=0)


def unit_norm_decoder_grad_adjustment_(ae):
    w, g = ae.decoder.weight.data, ae.decoder.weight.grad
    g.add_(torch.einsum("bn,bn->n", w, g) * w, alpha=-1)


def normalized_mse(recon, xs):
    return (((recon - xs) ** 2).mean(dim=1) / (xs**2).mean(dim=1)).mean()


def geometric_median(points, iters=20):
    guess = points.mean(0)
    for _ in range(iters):
        w = 1.0 / torch.norm(points - guess, dim=1).clamp_min(1e-8)
        guess = (w[:, None] * points).sum(0) / w.sum()
    return guess


gpt = GPT().to(dev).to(torch.bfloat16).eval().requires_grad_(False)
acts = {}
gpt.h[4].register_forward_hook(lambda m, i, o: acts.__setitem__("x", o))
ae = FastAutoencoder(N_DIRS, D, K, AUXK, DEAD_STEPS).to(dev)
ae.encoder.weight.data = ae.decoder.weight.data.T.clone()
unit_norm_decoder_(ae)
opt = torch.optim.Adam(ae.parameters(), lr=2e-4, eps=6.25e-10)
g = torch.Generator(device=dev).manual_seed(2753)
print(sum(p.numel() for p in ae.parameters()), "autoencoder parameters")
report("frozen_gpt_and_topk_sae_131072_built")


def activations(b):
    tok = torch.randint(0, VOCAB, (b, T), device=dev, generator=g)
    with torch.no_grad():
        gpt(tok)
    return acts.pop("x").float().reshape(-1, D)


x0 = activations(B)
ae.pre_bias.data = geometric_median(x0)
del x0
for step in range(6):
    x = activations(B)
    recons, auxk_inds, auxk_vals = ae(x)
    mse = normalized_mse(recons, x)
    auxk_recons = ae.decode_sparse(auxk_inds, auxk_vals)
    auxk_loss = normalized_mse(auxk_recons, x - recons.detach() + ae.pre_bias.detach()).nan_to_num(0)
    loss = mse + auxk_loss / 32
    opt.zero_grad(set_to_none=True)
    loss.backward()
    unit_norm_decoder_grad_adjustment_(ae)
    opt.step()
    unit_norm_decoder_(ae)
    dead = (ae.stats_last_nonzero > DEAD_STEPS).float().mean()
    print(step, round(mse.item(), 5), round(auxk_loss.item(), 5), round(dead.item(), 4))
report("geometric_median_and_6_sae_steps_8192_tokens")

with torch.inference_mode():
    fvu, fired = [], torch.zeros(N_DIRS, dtype=torch.bool, device=dev)
    for _ in range(4):
        x = activations(B)
        recons, latents = ae.dense(x)
        fvu.append(((recons - x) ** 2).sum() / ((x - x.mean(0)) ** 2).sum())
        fired |= (latents > 0).any(0)
    print(
        "fvu",
        round(torch.stack(fvu).mean().item(), 4),
        "never fired",
        round(1 - fired.float().mean().item(), 4),
    )
report("inference_mode_dense_eval_4x8192")
print("done")
