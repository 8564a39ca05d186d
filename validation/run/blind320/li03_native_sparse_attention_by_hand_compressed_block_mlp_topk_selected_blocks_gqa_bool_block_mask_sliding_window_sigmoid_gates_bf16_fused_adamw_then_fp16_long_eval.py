"""Native Sparse Attention (DeepSeek, Yuan et al. 2025) written from the paper in plain PyTorch, as a
reference implementation a researcher writes before any Triton kernel: three attention branches per
query, mixed by sigmoid gates computed from the hidden state.
  * compression: keys/values of each non-overlapping 32-token block are squashed by a small MLP
    (with an intra-block position embedding) into one token; queries attend (causally at block level,
    plus a learnt always-visible sink token) to these compressed tokens;
  * selection: the compression branch's attention probabilities, summed over the query heads of a
    GQA group and pooled to 64-token selection blocks, pick the top-4 blocks per query (the first and
    the current block forced in); the picks are scattered into a boolean block mask, expanded with
    ``repeat_interleave`` to a token mask and combined with causality for SDPA;
  * sliding window: SDPA with a 128-token band mask.

Phases: 0 model and a synthetic associative-recall data set on the GPU; 1 training with bf16 autocast
and fused AdamW; 2 evaluation of a half() copy at twice the training context (no_grad); 3 gate
statistics and the selection branch's hit rate on the recall keys (inference_mode, fp16)."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(1234)
device = "cuda"

VOCAB, D, HQ, HKV, DH, LAYERS = 4096, 512, 8, 2, 64, 4
CMP, SEL, TOPN, WIN = 32, 64, 4, 128


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class NSAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(D, HQ * DH, bias=False)
        self.kv = nn.Linear(D, 2 * HKV * DH, bias=False)
        self.o = nn.Linear(HQ * DH, D, bias=False)
        self.gate = nn.Linear(D, 3 * HQ)
        self.blk_pos = nn.Parameter(torch.randn(CMP, DH) * 0.02)
        self.cmp_k = nn.Sequential(nn.Linear(CMP * DH, 2 * DH), nn.GELU(), nn.Linear(2 * DH, DH))
        self.cmp_v = nn.Sequential(nn.Linear(CMP * DH, 2 * DH), nn.GELU(), nn.Linear(2 * DH, DH))
        self.sink_k = nn.Parameter(torch.zeros(HKV, 1, DH))
        self.sink_v = nn.Parameter(torch.zeros(HKV, 1, DH))

    def forward(self, x, return_sel=False):
        b, t, _ = x.shape
        g = HQ // HKV
        nc, ns = t // CMP, t // SEL
        q = self.q(x).view(b, t, HQ, DH).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, HKV, DH).permute(2, 0, 3, 1, 4)
        # compression branch
        kb = (k.reshape(b, HKV, nc, CMP, DH) + self.blk_pos).flatten(-2)
        vb = (v.reshape(b, HKV, nc, CMP, DH) + self.blk_pos).flatten(-2)
        kc = torch.cat([self.sink_k.expand(b, -1, -1, -1), self.cmp_k(kb)], dim=2)
        vc = torch.cat([self.sink_v.expand(b, -1, -1, -1), self.cmp_v(vb)], dim=2)
        pos = torch.arange(t, device=x.device)
        blk_end = torch.arange(nc, device=x.device) * CMP + CMP - 1
        cmask = torch.cat(
            [torch.ones(t, 1, dtype=torch.bool, device=x.device), blk_end[None, :] <= pos[:, None]], 1
        )
        qg = q.view(b, HKV, g, t, DH)
        scores = torch.einsum("bhgtd,bhcd->bhgtc", qg, kc) * DH**-0.5
        scores = scores.masked_fill(~cmask, float("-inf"))
        p_cmp = scores.float().softmax(-1)
        o_cmp = torch.einsum("bhgtc,bhcd->bhgtd", p_cmp.to(vc.dtype), vc).reshape(b, HQ, t, DH)
        # selection branch: importance per 64-token block, summed over the GQA group
        imp = p_cmp[..., 1:].sum(2).view(b, HKV, t, ns, SEL // CMP).sum(-1)
        cur = pos // SEL
        imp = imp.masked_fill(torch.arange(ns, device=x.device)[None, :] > cur[:, None], float("-inf"))
        forced = F.one_hot(cur, ns).bool() | (torch.arange(ns, device=x.device) == 0)
        imp = imp.masked_fill(forced, float("inf"))
        sel = imp.topk(TOPN, dim=-1).indices
        bmask = torch.zeros(b, HKV, t, ns, dtype=torch.bool, device=x.device).scatter_(-1, sel, True)
        tmask = bmask.repeat_interleave(SEL, dim=-1) & (pos[None, :] <= pos[:, None])
        ke = k.repeat_interleave(g, dim=1)
        ve = v.repeat_interleave(g, dim=1)
        o_sel = F.scaled_dot_product_attention(q, ke, ve, attn_mask=tmask.repeat_interleave(g, dim=1))
        # sliding window branch
        band = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - WIN)
        o_win = F.scaled_dot_product_attention(q, ke, ve, attn_mask=band)
        gates = torch.sigmoid(self.gate(x)).view(b, t, 3, HQ).permute(2, 0, 3, 1).unsqueeze(-1)
        o = gates[0] * o_cmp + gates[1] * o_sel + gates[2] * o_win
        out = self.o(o.transpose(1, 2).reshape(b, t, HQ * DH))
        if return_sel:
            return out, sel, gates
        return out


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.attn = NSAttention()
        self.w1, self.w3 = nn.Linear(D, 1408, bias=False), nn.Linear(D, 1408, bias=False)
        self.w2 = nn.Linear(1408, D, bias=False)

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class NSALM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList([Layer() for _ in range(LAYERS)])
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def recall_batch(bsz, t):
    # key-value pairs scattered in noise, queried at the end (associative recall)
    ids = torch.randint(64, VOCAB, (bsz, t), device=device)
    keys = torch.randint(1, 32, (bsz, 16), device=device)
    vals = torch.randint(32, 64, (bsz, 16), device=device)
    where = torch.stack([torch.randperm(t // 2 - 2, device=device)[:16] * 2 for _ in range(bsz)])
    ids.scatter_(1, where, keys)
    ids.scatter_(1, where + 1, vals)
    ids[:, -32::2] = keys
    ids[:, -31::2] = vals
    return ids


model = NSALM().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
print("params", sum(p.numel() for p in model.parameters()))
report("phase0 build")

T = 1024
for step in range(8):
    ids = recall_batch(8, T + 1)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
print("train loss", round(loss.item(), 3))
report("phase1 train")

half = copy.deepcopy(model).half().eval()
with torch.no_grad():
    ids = recall_batch(4, 2 * T + 1)
    logits = half(ids[:, :-1])
    acc = (logits[:, -31::2].argmax(-1) == ids[:, -31::2]).float().mean()
print("recall acc at 2T", round(acc.item(), 3))
report("phase2 fp16_long_eval")

with torch.inference_mode():
    ids = recall_batch(4, 2 * T)
    x = half.emb(ids)
    stats = []
    for layer in half.layers:
        out, sel, gates = layer.attn(layer.n1(x), return_sel=True)
        stats.append(gates.float().mean(dim=(1, 2, 3, 4)))
        x = x + out
        h = layer.n2(x)
        x = x + layer.w2(F.silu(layer.w1(h)) * layer.w3(h))
    g = torch.stack(stats)
print("gates (cmp, sel, win) per layer", [tuple(round(v, 3) for v in row) for row in g.tolist()])
report("phase3 gates")
