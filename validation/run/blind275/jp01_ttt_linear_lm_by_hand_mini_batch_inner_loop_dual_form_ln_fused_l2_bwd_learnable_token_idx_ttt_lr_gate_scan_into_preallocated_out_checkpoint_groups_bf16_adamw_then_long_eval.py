"""A TTT-Linear language model ("Learning to (Learn at Test Time)", Sun et al. 2024) written by hand the way
test-time-training/ttt-lm-pytorch's ttt.py writes its TTT layer, in a transformer backbone (6 layers of
d 768, 12 heads of 64, SwiGLU 2,048, RMSNorm, vocabulary 32,000): each head's hidden state is a linear model
W1 (64 x 64) + b1, tiled over the batch (`torch.tile(W1.unsqueeze(0), (B, 1, 1, 1))`), updated by one step of
gradient descent per mini-batch of 16 tokens on the self-supervised loss ||LN(XK W1 + b1) - (XV - XK)||^2,
its gradient taken by hand (`ln_fused_l2_bwd`), and read out in the dual form (`torch.tril(XQ @ XK^T)`,
`torch.tril(eta) @ grad`, the last row of eta for W1_last / b1_last). The inner learning rate is the
product of a learnable per-token index (1 / (i + 1) plus a learned offset, `clamp_min(0)`) and a per-head
sigmoid gate (`einsum("bnkc,hdc->bhnkd")`), eta of shape (B, H, NC, CS, CS). Q and K get RoPE with positions
modulo the mini-batch size; the output is post-normed (LayerNorm), gated by `gelu(g_proj(x), "tanh")` and
projected. The mini-batches are walked by ttt.py's `scan`: a Python loop over the NC mini-batches writing
each output into a preallocated `torch.empty((NC, B, H, CS, HD))` by `out[i] = y` (autograd through the
copies), wrapped in non-reentrant `torch.utils.checkpoint` per group of 16 mini-batches when
checkpoint_group > 0. Phase 0: the model (random weights). Phase 1: bf16 autocast, AdamW with clipping,
2 steps of 8 x 1,024 tokens with checkpoint groups of 16. Phase 2: 1 more step of 8 x 1,024 without the
scan checkpointing (every mini-batch's W1 kept for the backward). Phase 3: a no_grad evaluation at
2 x 2,048 tokens (128 mini-batches a layer). Synthetic seeded tokens, no value-dependent sizes. 4 phases
and the end."""

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

torch.manual_seed(2751)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


VOCAB, D, LAYERS, H, HD, FF, CS = 32000, 768, 6, 12, 64, 2048, 16
TTT_BASE_LR = 1.0


def rope_tables(cs, hd, device):
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=device).float() / hd))
    t = torch.arange(cs, device=device).float()
    f = torch.outer(t, inv)
    emb = torch.cat([f, f], -1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, -1)
    return torch.cat([-x2, x1], -1)


def ln_fwd(x, gamma, beta, eps=1e-6):
    mu = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    std = torch.sqrt(var + eps)
    x_hat = (x - mu) / std
    return gamma * x_hat + beta


def ln_fused_l2_bwd(x, l2_target, gamma, beta, eps=1e-6):
    # the gradient of 0.5 * ||LN(x) - target||^2 with respect to x, by hand (ttt.py)
    d = x.shape[-1]
    mu = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    std = torch.sqrt(var + eps)
    x_hat = (x - mu) / std
    y = gamma * x_hat + beta
    grad_output = y - l2_target
    grad_x_hat = grad_output * gamma
    z = (
        (1.0 / d)
        * (
            d * grad_x_hat
            - grad_x_hat.sum(dim=-1, keepdim=True)
            - x_hat * (grad_x_hat * x_hat).sum(dim=-1, keepdim=True)
        )
        / std
    )
    return z


def scan(f, init, xs, out, checkpoint_group=0):
    carry = init
    num_items = len(next(iter(xs.values())))

    def scan_fn(carry, i_start, i_end):
        for i in range(i_start, i_end):
            x = {key: tensor[i] for key, tensor in xs.items()}
            carry, y = f(carry, x)
            out[i] = y
        return carry

    if checkpoint_group > 0:
        for k in range(0, num_items, checkpoint_group):
            carry = torch.utils.checkpoint.checkpoint(
                scan_fn, carry, k, min(k + checkpoint_group, num_items), use_reentrant=False
            )
    else:
        carry = scan_fn(carry, 0, num_items)
    return carry, out


class TTTLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(D, H * HD, bias=False)
        self.k_proj = nn.Linear(D, H * HD, bias=False)
        self.v_proj = nn.Linear(D, H * HD, bias=False)
        self.o_proj = nn.Linear(H * HD, D, bias=False)
        self.g_proj = nn.Linear(D, H * HD, bias=False)
        self.W1 = nn.Parameter(torch.normal(0, 0.02, size=(H, HD, HD)))
        self.b1 = nn.Parameter(torch.zeros(H, 1, HD))
        self.learnable_ttt_lr_weight = nn.Parameter(torch.normal(0, 0.02, size=(H, 1, D)))
        self.learnable_ttt_lr_bias = nn.Parameter(torch.zeros(H, 1))
        self.register_buffer("token_idx", 1.0 / torch.arange(1, CS + 1), persistent=False)
        self.learnable_token_idx = nn.Parameter(torch.zeros(CS))
        self.ttt_norm_weight = nn.Parameter(torch.ones(H, HD))
        self.ttt_norm_bias = nn.Parameter(torch.zeros(H, HD))
        self.post_norm = nn.LayerNorm(H * HD, eps=1e-6)
        self.checkpoint_group = 0

    def get_eta(self, x):
        b, nc = x.shape[0], x.shape[1]
        ttt_lr = torch.einsum(
            "bnkc,hdc->bhnkd", x, self.learnable_ttt_lr_weight
        ) + self.learnable_ttt_lr_bias.reshape(1, -1, 1, 1, 1)
        ttt_lr = torch.sigmoid(ttt_lr).permute(0, 1, 2, 4, 3)  # (B, H, NC, 1, CS)
        ttt_lr_eta = TTT_BASE_LR * ttt_lr / HD
        token_idx = torch.clamp_min(self.token_idx + self.learnable_token_idx, 0.0)
        token_eta = torch.broadcast_to(token_idx.reshape(1, 1, 1, CS, 1), (b, H, nc, CS, 1))
        return token_eta * ttt_lr_eta  # (B, H, NC, CS, CS)

    def compute_mini_batch(self, params, inputs):
        W1_init, b1_init = params["W1_states"], params["b1_states"]
        XQ, XV, XK, eta = inputs["XQ"], inputs["XV"], inputs["XK"], inputs["eta"]
        X1 = XK
        Z1 = X1 @ W1_init + b1_init
        target = XV - XK
        ln_w = self.ttt_norm_weight.reshape(H, 1, HD)
        ln_b = self.ttt_norm_bias.reshape(H, 1, HD)
        grad_l_wrt_Z1 = ln_fused_l2_bwd(Z1, target, ln_w, ln_b)
        Attn1 = torch.tril(XQ @ X1.transpose(-2, -1))
        b1_bar = b1_init - torch.tril(eta) @ grad_l_wrt_Z1
        Z1_bar = XQ @ W1_init - (eta * Attn1) @ grad_l_wrt_Z1 + b1_bar
        last_eta = eta[:, :, -1, :, None]
        W1_last = W1_init - (last_eta * X1).transpose(-1, -2) @ grad_l_wrt_Z1
        b1_last = b1_init - torch.sum(last_eta * grad_l_wrt_Z1, dim=-2, keepdim=True)
        Z1_bar = ln_fwd(Z1_bar, ln_w, ln_b)
        return {"W1_states": W1_last, "b1_states": b1_last}, XQ + Z1_bar

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        nc = t // CS
        XQ = self.q_proj(x).view(b, t, H, HD).transpose(1, 2)
        XK = self.k_proj(x).view(b, t, H, HD).transpose(1, 2)
        XV = self.v_proj(x).view(b, t, H, HD).transpose(1, 2)
        # RoPE with position_ids % mini_batch_size, as ttt.py
        cs_ = cos.repeat(nc, 1)
        sn_ = sin.repeat(nc, 1)
        XQ = XQ * cs_ + rotate_half(XQ) * sn_
        XK = XK * cs_ + rotate_half(XK) * sn_
        XQ, XK, XV = (z.reshape(b, H, nc, CS, HD) for z in (XQ, XK, XV))
        eta = self.get_eta(x.reshape(b, nc, CS, D))
        init = {
            "W1_states": torch.tile(self.W1.unsqueeze(0), dims=(b, 1, 1, 1)),
            "b1_states": torch.tile(self.b1.unsqueeze(0), dims=(b, 1, 1, 1)),
        }
        xs = {k: v.permute(2, 0, 1, 3, 4) for k, v in {"XQ": XQ, "XV": XV, "XK": XK, "eta": eta}.items()}
        out = torch.empty((nc, b, H, CS, HD), device=x.device, dtype=XV.dtype)
        _, out = scan(self.compute_mini_batch, init, xs, out, self.checkpoint_group)
        y = out.permute(1, 0, 3, 2, 4).reshape(b, t, H * HD)
        y = self.post_norm(y)
        y = F.gelu(self.g_proj(x), approximate="tanh") * y
        return self.o_proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.RMSNorm(D, eps=1e-6)
        self.ttt = TTTLinear()
        self.n2 = nn.RMSNorm(D, eps=1e-6)
        self.gate = nn.Linear(D, FF, bias=False)
        self.up = nn.Linear(D, FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.ttt(self.n1(x), cos, sin)
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TTTLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(D, eps=1e-6)
        self.head = nn.Linear(D, VOCAB, bias=False)
        cos, sin = rope_tables(CS, HD, "cpu")
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def set_checkpoint_group(self, g):
        for blk in self.blocks:
            blk.ttt.checkpoint_group = g

    def forward(self, idx, targets=None):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin)
        logits = self.head(self.norm(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.reshape(-1))


model = TTTLM().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
print(sum(p.numel() for p in model.parameters()), "parameters")
g = torch.Generator(device=dev).manual_seed(275)
report("ttt_linear_lm_built")


def batch(b, t):
    tok = torch.randint(0, VOCAB, (b, t + 1), device=dev, generator=g)
    return tok[:, :-1], tok[:, 1:]


def train(steps, b, t):
    for step in range(steps):
        x, y = batch(b, t)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        print(step, round(loss.item(), 4))


model.train()
model.set_checkpoint_group(16)
train(2, 8, 1024)
report("train_2_steps_8x1024_scan_checkpoint_groups_16")

model.set_checkpoint_group(0)
train(1, 8, 1024)
report("train_1_step_8x1024_no_scan_checkpoint")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    x, y = batch(2, 2048)
    loss = model(x, y)
    print("eval", round(loss.item(), 4))
report("no_grad_eval_2x2048")
print("done")
