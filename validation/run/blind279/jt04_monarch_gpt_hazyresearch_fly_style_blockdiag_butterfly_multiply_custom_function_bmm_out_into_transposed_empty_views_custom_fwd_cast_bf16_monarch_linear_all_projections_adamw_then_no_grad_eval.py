"""A GPT whose every projection is a Monarch matrix, written as HazyResearch's `fly` repository writes
its MonarchLinear (Dao et al., "Monarch: Expressive Structured Matrices", ICML 2022): two block-diagonal
factors w1 (k, q, p) and w2 (l, s, r) multiplied by `BlockdiagButterflyMultiply`, a
`torch.autograd.Function` under `torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.bfloat16)`
/ `custom_bwd`: the input reshaped to (batch, k, p) and transposed to (k, batch, p), the first
`torch.bmm` written with `out=` into a `torch.empty(batch, k, q).transpose(0, 1)` view, the result
permuted through reshape(batch, r, l).transpose(-1, -2).contiguous().transpose(0, 1), the second bmm
again into a transposed empty view, the output permute(1, 2, 0).reshape'd; the backward forms dw2 by
bmm against the saved intermediate, dout1 by bmm into a transposed empty view, dx by bmm into
`empty(batch, k, p).transpose(0, 1)`, dw1 against the re-viewed input. MonarchLinear adds a bias and
(for square shapes) uses nblocks 4. 12 blocks, d_model 1,024, 16 heads, SDPA causal attention, MLP
1,024 -> 4,096 -> 1,024 all Monarch (the qkv projection 1,024 -> 3,072, the output projection, fc1,
fc2), dense tied embedding and head over vocabulary 32,768. bf16 autocast (the Function casts its
inputs to bf16 itself), fp32 master weights. Phase 1: 5 AdamW steps at batch 8 x 1,024. Phase 2: no_grad
evaluation at batch 16 x 1,024. Seeded, fixed sizes. 2 phases + end."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2794)
dev = "cuda"
VOCAB, D_MODEL, N_LAYER, N_HEAD, SEQ = 32768, 1024, 12, 16, 1024


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class BlockdiagButterflyMultiply(torch.autograd.Function):
    """x: (..., n); w1_bfly: (k, q, p) with n = k * p; w2_bfly: (l, s, r) with l * r = k * q.
    Returns (..., s * l)."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.bfloat16)
    def forward(ctx, x, w1_bfly, w2_bfly):
        batch_shape, n = x.shape[:-1], x.shape[-1]
        batch_dim = math.prod(batch_shape)
        k, q, p = w1_bfly.shape
        l, s, r = w2_bfly.shape  # noqa: E741 (fly's names)
        assert k * p == n
        assert l * r == k * q
        x_reshaped = x.reshape(batch_dim, k, p).transpose(0, 1)
        out1 = torch.empty(batch_dim, k, q, device=x.device, dtype=x.dtype).transpose(0, 1)
        out1 = torch.bmm(x_reshaped, w1_bfly.transpose(-1, -2), out=out1)
        out1 = out1.transpose(0, 1).reshape(batch_dim, r, l).transpose(-1, -2).contiguous().transpose(0, 1)
        out2 = torch.empty(batch_dim, l, s, device=x.device, dtype=x.dtype).transpose(0, 1)
        out2 = torch.bmm(out1, w2_bfly.transpose(-1, -2), out=out2)
        out2 = out2.permute(1, 2, 0).reshape(*batch_shape, s * l)
        ctx.save_for_backward(x, w1_bfly, w2_bfly, out1)
        return out2

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, dout):
        x, w1_bfly, w2_bfly, out1 = ctx.saved_tensors
        batch_shape, n = x.shape[:-1], x.shape[-1]
        batch_dim = math.prod(batch_shape)
        k, q, p = w1_bfly.shape
        l, s, r = w2_bfly.shape  # noqa: E741 (fly's names)
        dx, dw1_bfly, dw2_bfly = None, None, None
        dout_reshaped = dout.reshape(batch_dim, s, l).transpose(-1, -2).contiguous()
        dout_reshaped = dout_reshaped.transpose(0, 1)
        if ctx.needs_input_grad[2]:
            dw2_bfly = torch.bmm(dout_reshaped.transpose(-1, -2), out1)
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[0]:
            dout1 = torch.empty(batch_dim, l, r, device=x.device, dtype=x.dtype).transpose(0, 1)
            dout1 = torch.bmm(dout_reshaped, w2_bfly, out=dout1)
            dout1 = (
                dout1.transpose(0, 1).transpose(-1, -2).contiguous().reshape(batch_dim, k, q).transpose(0, 1)
            )
            if ctx.needs_input_grad[0]:
                dx = torch.empty(batch_dim, k, p, device=x.device, dtype=x.dtype)
                dx = (
                    torch.bmm(dout1, w1_bfly, out=dx.transpose(0, 1)).transpose(0, 1).reshape(*batch_shape, n)
                )
            if ctx.needs_input_grad[1]:
                x_reshaped = x.reshape(batch_dim, k, p).transpose(0, 1)
                dw1_bfly = torch.bmm(dout1.transpose(-1, -2), x_reshaped)
        return dx, dw1_bfly, dw2_bfly


blockdiag_butterfly_multiply = BlockdiagButterflyMultiply.apply


class MonarchLinear(nn.Module):
    def __init__(self, in_features, out_features, nblocks=4, bias=True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        in_blksz = math.ceil(in_features / nblocks)
        out_blksz = math.ceil(out_features / nblocks)
        self.in_features_extended = in_blksz * nblocks
        self.out_features_extended = out_blksz * nblocks
        if in_features < out_features:
            self.blkdiag1 = nn.Parameter(torch.empty(nblocks, in_blksz, in_blksz))
            self.blkdiag2 = nn.Parameter(torch.empty(nblocks, out_blksz, in_blksz))
        else:
            self.blkdiag1 = nn.Parameter(torch.empty(nblocks, out_blksz, in_blksz))
            self.blkdiag2 = nn.Parameter(torch.empty(nblocks, out_blksz, out_blksz))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        for blkdiag in (self.blkdiag1, self.blkdiag2):
            fan_in = blkdiag.shape[-1]
            nn.init.uniform_(blkdiag, -1.0 / math.sqrt(fan_in), 1.0 / math.sqrt(fan_in))

    def forward(self, x):
        out = blockdiag_butterfly_multiply(x, self.blkdiag1, self.blkdiag2)
        out = out[..., : self.out_features]
        return out + self.bias.to(out.dtype) if self.bias is not None else out


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D_MODEL)
        self.c_attn = MonarchLinear(D_MODEL, 3 * D_MODEL)
        self.c_proj = MonarchLinear(D_MODEL, D_MODEL)
        self.ln_2 = nn.LayerNorm(D_MODEL)
        self.fc1 = MonarchLinear(D_MODEL, 4 * D_MODEL)
        self.fc2 = MonarchLinear(4 * D_MODEL, D_MODEL)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D_MODEL, dim=2)
        q = q.view(b, t, N_HEAD, c // N_HEAD).transpose(1, 2)
        k = k.view(b, t, N_HEAD, c // N_HEAD).transpose(1, 2)
        v = v.view(b, t, N_HEAD, c // N_HEAD).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln_2(x)), approximate="tanh"))


class MonarchGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D_MODEL)
        self.wpe = nn.Embedding(SEQ, D_MODEL)
        self.h = nn.ModuleList(Block() for _ in range(N_LAYER))
        self.ln_f = nn.LayerNorm(D_MODEL)
        self.lm_head = nn.Linear(D_MODEL, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


model = MonarchGPT().to(dev)
print("params", sum(p.numel() for p in model.parameters()))
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
report("setup")

for step in range(5):
    tokens = torch.randint(0, VOCAB, (8, SEQ + 1), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), tokens[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
    del logits, loss
report("train")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    tokens = torch.randint(0, VOCAB, (16, SEQ + 1), device=dev)
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), tokens[:, 1:].reshape(-1))
    print(f"eval loss {loss.item():.4f}")
    del logits
report("eval")
print("done")
