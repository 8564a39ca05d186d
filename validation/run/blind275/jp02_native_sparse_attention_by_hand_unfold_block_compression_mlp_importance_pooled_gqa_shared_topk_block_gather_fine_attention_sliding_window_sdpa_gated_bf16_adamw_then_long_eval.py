"""Native Sparse Attention (DeepSeek, "Native Sparse Attention: Hardware-Aligned and Natively Trainable
Sparse Attention", 2025) written by hand in plain PyTorch the way reference ports such as lucidrains'
native-sparse-attention-pytorch do it without their Triton kernels, in a GPT (6 layers of d 1,024, 16 query
heads of 64 over 4 key/value heads, SwiGLU 2,816, RMSNorm, RoPE, vocabulary 32,000). Each attention layer
has three branches, mixed by a per-head sigmoid gate (`Linear(d, 3 * heads)`):
- compression: keys and values cut into overlapping blocks of 32 with stride 16 by `Tensor.unfold(2, 32, 16)`,
  a learned intra-block position added, each block flattened and compressed by a 2-layer MLP to one key /
  value, plus one learned memory key/value so that no row is empty; the queries attend over them with an
  explicit score matrix (B, Hkv, G, T, blocks + 1), causally masked by block end position, softmax in fp32;
- selection: the compressed attention probabilities, summed over the 4 query heads of a group (GQA-shared
  selection), pooled onto selection blocks of 64 tokens (`F.pad` + `unfold(-1, 5, 4).sum(-1)`), the first
  block and the query's own block forced in, future blocks masked, `torch.topk` of 8 blocks per query; the
  selected key/value blocks gathered by advanced indexing `kb[bi, hi, sel]` into (B, Hkv, T, 8, 64, 64)
  tensors (512 keys per query), token-level causal mask, fp32 softmax, einsum readout -- the backward
  scatters through `index_put_(accumulate=True)`;
- sliding window: `F.scaled_dot_product_attention` with a boolean band mask of 256 and `enable_gqa=True`.
Phase 0: the model (random weights). Phase 1: bf16 autocast, AdamW with clipping, 4 steps of 2 x 2,048
tokens. Phase 2: a no_grad evaluation of 1 x 4,096 tokens. Synthetic seeded tokens; the number of selected
blocks is fixed (top-k), so no value-dependent sizes. 2 phases and the end."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2752)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


VOCAB, D, LAYERS, HQ, HKV, HD, FF = 32000, 1024, 6, 16, 4, 64, 2816
G = HQ // HKV
CMP_L, CMP_S, SEL_L, SEL_N, WIN = 32, 16, 64, 8, 256


def rope(t, device):
    inv = 1.0 / (10000.0 ** (torch.arange(0, HD, 2, device=device).float() / HD))
    f = torch.outer(torch.arange(t, device=device).float(), inv)
    emb = torch.cat([f, f], -1)
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):
    x1, x2 = x.chunk(2, -1)
    return x * cos.to(x.dtype) + torch.cat([-x2, x1], -1) * sin.to(x.dtype)


class Compressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = nn.Parameter(torch.zeros(HKV, CMP_L, HD))
        self.mlp = nn.Sequential(
            nn.Linear(CMP_L * HD, CMP_L * HD // 4), nn.GELU(), nn.Linear(CMP_L * HD // 4, HD)
        )

    def forward(self, x):  # (B, Hkv, T, HD) -> (B, Hkv, blocks, HD)
        blocks = x.unfold(2, CMP_L, CMP_S).transpose(-1, -2)  # (B, Hkv, nb, CMP_L, HD)
        blocks = blocks + self.pos[None, :, None]
        return self.mlp(blocks.flatten(-2))


class NSAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(D, HQ * HD, bias=False)
        self.kv = nn.Linear(D, 2 * HKV * HD, bias=False)
        self.o = nn.Linear(HQ * HD, D, bias=False)
        self.gate = nn.Linear(D, 3 * HQ)
        self.k_cmp = Compressor()
        self.v_cmp = Compressor()
        self.mem_kv = nn.Parameter(torch.randn(2, HKV, 1, HD) * 0.02)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = apply_rope(self.q(x).view(b, t, HQ, HD).transpose(1, 2), cos, sin)
        k, v = self.kv(x).view(b, t, 2, HKV, HD).permute(2, 0, 3, 1, 4)
        k = apply_rope(k, cos, sin)
        scale = HD**-0.5

        # compression branch
        ck = torch.cat([self.mem_kv[0].expand(b, -1, -1, -1).to(k.dtype), self.k_cmp(k)], 2)
        cv = torch.cat([self.mem_kv[1].expand(b, -1, -1, -1).to(v.dtype), self.v_cmp(v)], 2)
        nb = ck.shape[2] - 1
        qg = q.view(b, HKV, G, t, HD)
        cscores = torch.einsum("bhgtd,bhnd->bhgtn", qg, ck).float() * scale
        pos = torch.arange(t, device=x.device)
        block_end = torch.arange(nb, device=x.device) * CMP_S + CMP_L - 1
        cmask = torch.cat(
            [torch.ones(t, 1, dtype=torch.bool, device=x.device), block_end[None] <= pos[:, None]], 1
        )
        cscores = cscores.masked_fill(~cmask, float("-inf"))
        cattn = cscores.softmax(-1)
        o_cmp = torch.einsum("bhgtn,bhnd->bhgtd", cattn.to(cv.dtype), cv).reshape(b, HQ, t, HD)

        # selection branch: importance from the compressed attention, shared over the group's heads
        imp = cattn[..., 1:].sum(2)  # (B, Hkv, T, nb)
        ratio = SEL_L // CMP_S
        nsel = t // SEL_L
        need = nsel * ratio + 1
        imp = F.pad(imp, (0, need - nb))
        sel_scores = imp.unfold(-1, ratio + 1, ratio).sum(-1)  # (B, Hkv, T, nsel)
        sel_start = torch.arange(nsel, device=x.device) * SEL_L
        own = (pos // SEL_L)[:, None] == torch.arange(nsel, device=x.device)[None]
        sel_scores = sel_scores.masked_fill(own | (torch.arange(nsel, device=x.device) == 0)[None], 1e4)
        sel_scores = sel_scores.masked_fill(sel_start[None] > pos[:, None], float("-inf"))
        sel_idx = sel_scores.topk(SEL_N, dim=-1).indices  # (B, Hkv, T, SEL_N)
        kb = k.view(b, HKV, nsel, SEL_L, HD)
        vb = v.view(b, HKV, nsel, SEL_L, HD)
        bi = torch.arange(b, device=x.device)[:, None, None, None]
        hi = torch.arange(HKV, device=x.device)[None, :, None, None]
        sk = kb[bi, hi, sel_idx].flatten(3, 4)  # (B, Hkv, T, SEL_N * SEL_L, HD)
        sv = vb[bi, hi, sel_idx].flatten(3, 4)
        tok = (sel_idx[..., None] * SEL_L + torch.arange(SEL_L, device=x.device)).flatten(3)
        fmask = tok <= pos[None, None, :, None]  # (B, Hkv, T, 512)
        fscores = torch.einsum("bhgtd,bhtkd->bhgtk", qg, sk).float() * scale
        fscores = fscores.masked_fill(~fmask[:, :, None], float("-inf"))
        fattn = fscores.softmax(-1)
        o_slc = torch.einsum("bhgtk,bhtkd->bhgtd", fattn.to(sv.dtype), sv).reshape(b, HQ, t, HD)

        # sliding window branch
        band = (pos[:, None] >= pos[None]) & (pos[:, None] - pos[None] < WIN)
        o_win = F.scaled_dot_product_attention(q, k, v, attn_mask=band, enable_gqa=True)

        gates = torch.sigmoid(self.gate(x)).view(b, t, 3, HQ).permute(2, 0, 3, 1)[..., None]
        o = gates[0] * o_cmp + gates[1] * o_slc + gates[2] * o_win
        return self.o(o.transpose(1, 2).reshape(b, t, HQ * HD))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.RMSNorm(D)
        self.attn = NSAttention()
        self.n2 = nn.RMSNorm(D)
        self.w1 = nn.Linear(D, FF, bias=False)
        self.w3 = nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.n1(x), cos, sin)
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class NSAGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx, targets):
        cos, sin = rope(idx.shape[1], idx.device)
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.reshape(-1))


model = NSAGPT().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
print(sum(p.numel() for p in model.parameters()), "parameters")
g = torch.Generator(device=dev).manual_seed(2752)
report("nsa_gpt_built")


def batch(b, t):
    tok = torch.randint(0, VOCAB, (b, t + 1), device=dev, generator=g)
    return tok[:, :-1], tok[:, 1:]


model.train()
for step in range(4):
    x, y = batch(2, 2048)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(step, round(loss.item(), 4))
report("train_4_steps_2x2048_nsa")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    x, y = batch(1, 4096)
    print("eval", round(model(x, y).item(), 4))
report("no_grad_eval_1x4096")
print("done")
