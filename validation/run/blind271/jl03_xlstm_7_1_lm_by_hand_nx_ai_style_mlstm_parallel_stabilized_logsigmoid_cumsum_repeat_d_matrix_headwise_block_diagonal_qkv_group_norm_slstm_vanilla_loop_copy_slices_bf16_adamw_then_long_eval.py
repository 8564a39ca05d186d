"""An xLSTM[7:1] language model written the way NX-AI's reference code (NX-AI/xlstm: blocks/mlstm/layer.py,
cell.py, backends.py `parallel_stabilized_simple`, blocks/slstm/src/vanilla) computes it in plain PyTorch,
no CUDA kernels: 8 residual blocks of d 768, the fourth an sLSTM block, the others mLSTM blocks. mLSTM
block: pre-LayerNorm, up-projection to 2 x 1,536, a causal depthwise Conv1d (kernel 4, padded and
sliced) with SiLU, q/k/v by `LinearHeadwiseExpand` (block-diagonal: `einsum("...hd,hod->...ho")` over 384
blocks of 4), input and forget gates from `cat([q, k, v])`, the parallel stabilised mLSTM over 4 heads:
`F.logsigmoid` forget gates, their `cumsum` with a zero row concatenated, `repeat(1, 1, 1, S + 1)` and
the difference with its transpose, `torch.where` with the lower-triangular boolean mask (a registered
(2,048, 2,048) buffer at the full context, a fresh `torch.tril` below it), plus the input gates, a
row-wise max stabiliser, `exp`, `q @ k^T` times that D matrix, the normaliser
`maximum(|C.sum(-1)|, exp(-max))`, `C / n @ v`; a multi-head LayerNorm by `F.group_norm` over heads, a
learnable skip, the output gate SiLU(z), down-projection. sLSTM block: causal conv for the i/f gates,
four headwise gate projections, the vanilla backend's Python loop over time with exponential gating and
the stabiliser state (`logsigmoid`, `max`, `exp`), the block-diagonal recurrent matrix per head applied by
`matmul` each step and every state written into a preallocated (4, S + 1, B, H) tensor by
`states_all[:, i + 1] = states` (CopySlices in autograd), group norm, then a gated GeLU feed-forward
(factor 4/3). Vocabulary 32,000, untied head. bf16 autocast, AdamW with clipping, 4 steps at 16 x 512
tokens. Then a no_grad evaluation at 4 x 2,048 (the full context: the mask buffer used as is).
Fixed sizes. 2 phases after the model and the end."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2713)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


VOCAB, D, BLOCKS, SLSTM_AT, CONTEXT = 32000, 768, 8, (3,), 2048
INNER, NH, QKV_BLOCK, CONV_K = 2 * D, 4, 4, 4


class CausalConv1d(nn.Module):
    def __init__(self, dim, k):
        super().__init__()
        self.pad = k - 1
        self.conv = nn.Conv1d(dim, dim, k, padding=self.pad, groups=dim)

    def forward(self, x):  # (B, S, F)
        y = self.conv(x.transpose(1, 2))
        return y[:, :, : -self.pad].transpose(1, 2)


class LinearHeadwiseExpand(nn.Module):
    def __init__(self, dim, num_heads, bias=False):
        super().__init__()
        self.num_heads = num_heads
        d = dim // num_heads
        self.weight = nn.Parameter(torch.randn(num_heads, d, d) * d**-0.5)
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x):
        shape = x.shape
        x = x.view(*shape[:-1], self.num_heads, -1)
        x = torch.einsum("...hd,hod->...ho", x, self.weight)
        x = x.reshape(*shape[:-1], -1)
        return x + self.bias if self.bias is not None else x


class MultiHeadLayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):  # (B, NH, S, DH)
        b, nh, s, dh = x.shape
        y = F.group_norm(
            x.transpose(1, 2).reshape(b * s, nh * dh), num_groups=nh, weight=1.0 + self.weight, eps=1e-5
        )
        return y.view(b, s, nh, dh).transpose(1, 2)


def parallel_stabilized_simple(
    queries, keys, values, igate_preact, fgate_preact, lower_triangular_matrix, eps=1e-6
):
    B, NH, S, DH = queries.shape
    _dtype, _device = queries.dtype, queries.device
    log_fgates = F.logsigmoid(fgate_preact)
    if lower_triangular_matrix is None or S < lower_triangular_matrix.size(-1):
        ltr = torch.tril(torch.ones((S, S), dtype=torch.bool, device=_device))
    else:
        ltr = lower_triangular_matrix
    log_fgates_cumsum = torch.cat(
        [torch.zeros((B, NH, 1, 1), dtype=_dtype, device=_device), torch.cumsum(log_fgates, dim=-2)], dim=-2
    )
    rep_log_fgates_cumsum = log_fgates_cumsum.repeat(1, 1, 1, S + 1)
    _log_fg_matrix = rep_log_fgates_cumsum - rep_log_fgates_cumsum.transpose(-2, -1)
    log_fg_matrix = torch.where(ltr, _log_fg_matrix[:, :, 1:, 1:], -float("inf"))
    log_D_matrix = log_fg_matrix + igate_preact.transpose(-2, -1)
    max_log_D, _ = torch.max(log_D_matrix, dim=-1, keepdim=True)
    D_matrix = torch.exp(log_D_matrix - max_log_D)
    keys_scaled = keys / math.sqrt(DH)
    qk_matrix = queries @ keys_scaled.transpose(-2, -1)
    C_matrix = qk_matrix * D_matrix
    normalizer = torch.maximum(C_matrix.sum(dim=-1, keepdim=True).abs(), torch.exp(-max_log_D))
    C_matrix_normalized = C_matrix / (normalizer + eps)
    return C_matrix_normalized @ values


class mLSTMBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D, bias=False)
        self.proj_up = nn.Linear(D, 2 * INNER, bias=False)
        nh_qkv = INNER // QKV_BLOCK
        self.q_proj = LinearHeadwiseExpand(INNER, nh_qkv)
        self.k_proj = LinearHeadwiseExpand(INNER, nh_qkv)
        self.v_proj = LinearHeadwiseExpand(INNER, nh_qkv)
        self.conv1d = CausalConv1d(INNER, CONV_K)
        self.igate = nn.Linear(3 * INNER, NH)
        self.fgate = nn.Linear(3 * INNER, NH)
        nn.init.constant_(self.fgate.bias, 3.0)
        self.outnorm = MultiHeadLayerNorm(INNER)
        self.register_buffer(
            "causal_mask", torch.tril(torch.ones(CONTEXT, CONTEXT, dtype=torch.bool)), persistent=False
        )
        self.learnable_skip = nn.Parameter(torch.ones(INNER))
        self.proj_down = nn.Linear(INNER, D, bias=False)

    def forward(self, x):
        B, S, _ = x.shape
        x_mlstm, z = torch.split(self.proj_up(self.norm(x)), INNER, dim=-1)
        x_conv_act = F.silu(self.conv1d(x_mlstm))
        q, k, v = self.q_proj(x_conv_act), self.k_proj(x_conv_act), self.v_proj(x_mlstm)
        if_gate_input = torch.cat([q, k, v], dim=-1)
        q, k, v = (t.view(B, S, NH, -1).transpose(1, 2) for t in (q, k, v))
        igate_preact = self.igate(if_gate_input).transpose(-1, -2).unsqueeze(-1)
        fgate_preact = self.fgate(if_gate_input).transpose(-1, -2).unsqueeze(-1)
        h = parallel_stabilized_simple(q, k, v, igate_preact, fgate_preact, self.causal_mask)
        h = self.outnorm(h).transpose(1, 2).reshape(B, S, -1)
        h = (h + self.learnable_skip * x_conv_act) * F.silu(z)
        return x + self.proj_down(h)


def slstm_forward_pointwise(Wx, Ry, b, states):
    raw = Wx + Ry + b
    _y, c, n, m = torch.unbind(states.view(4, states.shape[1], -1), dim=0)
    iraw, fraw, zraw, oraw = torch.unbind(raw.view(raw.shape[0], 4, -1), dim=1)
    logfplusm = m + F.logsigmoid(fraw)
    mnew = torch.max(iraw, logfplusm)
    ogate = torch.sigmoid(oraw)
    igate = torch.exp(iraw - mnew)
    fgate = torch.exp(logfplusm - mnew)
    cnew = fgate * c + igate * torch.tanh(zraw)
    nnew = fgate * n + igate
    ynew = ogate * cnew / nnew
    return torch.stack((ynew, cnew, nnew, mnew), dim=0)


def slstm_forward(x, states, R, b):
    # x: (S, B, 4 * H); states: (4, B, H); R: (NH, DH, 4 * DH)
    S, batch = x.shape[0], x.shape[1]
    num_heads, head_dim = R.shape[0], R.shape[1]
    hidden = num_heads * head_dim
    states_all = torch.zeros([4, S + 1, batch, hidden], device=x.device, dtype=x.dtype)
    states_all[:, 0] = states
    Rt = R.transpose(1, 2).reshape(1, num_heads, head_dim, 4 * head_dim)
    for i, Wx_t in enumerate(x.unbind(dim=0)):
        Ry = (
            states[0]
            .reshape(batch, num_heads, 1, -1)
            .matmul(Rt)
            .reshape(batch, num_heads, 4, -1)
            .transpose(1, 2)
            .reshape(batch, -1)
        )
        states = slstm_forward_pointwise(Wx_t, Ry, b, states).to(x.dtype)
        states_all[:, i + 1] = states
    return states_all


class sLSTMBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D, bias=False)
        self.conv1d = CausalConv1d(D, CONV_K)
        self.fgate = LinearHeadwiseExpand(D, NH)
        self.igate = LinearHeadwiseExpand(D, NH)
        self.zgate = LinearHeadwiseExpand(D, NH)
        self.ogate = LinearHeadwiseExpand(D, NH)
        self.R = nn.Parameter(torch.randn(NH, D // NH, 4 * D // NH) * (D // NH) ** -0.5)
        self.b = nn.Parameter(torch.zeros(4 * D))
        self.group_norm = MultiHeadLayerNorm(D)
        self.ffn_norm = nn.LayerNorm(D, bias=False)
        ff = round(4 / 3 * D / 64) * 64
        self.proj_up = nn.Linear(D, 2 * ff, bias=False)
        self.proj_down = nn.Linear(ff, D, bias=False)

    def forward(self, x):
        B, S, _ = x.shape
        h = self.norm(x)
        hc = F.silu(self.conv1d(h))
        gates = torch.cat([self.igate(hc), self.fgate(hc), self.zgate(h), self.ogate(h)], dim=-1)
        states = torch.zeros(4, B, D, device=x.device, dtype=gates.dtype)
        y = slstm_forward(gates.transpose(0, 1), states, self.R.to(gates.dtype), self.b.to(gates.dtype))[
            0, 1:
        ]
        y = y.transpose(0, 1).view(B, S, NH, -1).transpose(1, 2)
        x = x + self.group_norm(y).transpose(1, 2).reshape(B, S, D)
        g, u = self.proj_up(self.ffn_norm(x)).chunk(2, dim=-1)
        return x + self.proj_down(F.gelu(g) * u)


class xLSTMLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(sLSTMBlock() if i in SLSTM_AT else mLSTMBlock() for i in range(BLOCKS))
        self.post_norm = nn.LayerNorm(D, bias=False)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.post_norm(x))


model = xLSTMLM().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
print(sum(p.numel() for p in model.parameters()) / 1e6, "M parameters")
report("xlstm_built_fp32")

g = torch.Generator(device=dev).manual_seed(13)
for step in range(4):
    idx = torch.randint(0, VOCAB, (16, 513), device=dev, generator=g)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.view(-1, VOCAB).float(), idx[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 4))
report("train_bf16_autocast_4_steps_16x512")

model.eval()
del logits, loss
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    idx = torch.randint(0, VOCAB, (4, CONTEXT + 1), device=dev, generator=g)
    loss = F.cross_entropy(model(idx[:, :-1]).view(-1, VOCAB).float(), idx[:, 1:].reshape(-1))
print("eval", round(loss.item(), 4))
report("no_grad_eval_4x2048_full_context")
print("done")
