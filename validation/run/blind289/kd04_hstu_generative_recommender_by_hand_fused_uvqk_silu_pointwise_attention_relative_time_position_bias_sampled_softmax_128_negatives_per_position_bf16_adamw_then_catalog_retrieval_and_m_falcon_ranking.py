"""HSTU, the Hierarchical Sequential Transduction Unit of Generative Recommenders (Zhai et al., ICML 2024,
"Actions Speak Louder than Words"), written by hand on padded batches as meta-recsys/generative-recommenders'
`SequentialTransductionUnitJagged` does its dense path. Synthetic MovieLens-20M-sized interaction
histories: a 1M-item catalog, per-user sequences of 20..200 items with increasing timestamps, padded at the
end. Each layer: layer_norm, one fused `x @ uvqk` projection through SiLU split into U, V, Q, K (4 heads of
64), pointwise attention `silu(einsum('bnhd,bmhd->bhnm') + rab) / n` (no softmax) times a causal and
key-padding mask, `einsum('bhnm,bmhd->bnhd')`, a LayerNorm of the concatenated heads gated by U, the output
projection and the residual. rab is `RelativeBucketedTimeAndPositionBasedBias`: a relative-position table
laid out by the `F.pad(...).repeat(N)` reshape trick plus log-bucketed timestamp differences
(`log(|dt|.clamp(1)) / 0.301`, 128 buckets) gathered by `index_select`. Items enter as embeddings x sqrt(d)
plus learned positions; outputs are L2-normalised. Loss: sampled softmax with 128 random negatives per
position (their embeddings gathered and L2-normalised, (B, n, 128, 256)), temperature 0.05, accidental hits
masked to -5e4 by `torch.where`, averaged over valid positions by a mask (no boolean indexing). AdamW, bf16
autocast around the encoder.
Phase 1: 10 steps at 64 users x 200. Phase 2: no_grad retrieval for 2,048 users (8 encoder batches), their
last valid position by `gather`, scored against the whole catalog in chunks of 262,144 items with
`topk(200)` per chunk and a merge. Phase 3: inference_mode bf16 M-FALCON ranking: 512 candidates per user
appended to 64 users' histories in micro-batches of 128, a mask letting each candidate see the history and
itself only, a ranking MLP on the candidates' outputs.
3 phases."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2894)
dev = "cuda"
NUM_ITEMS, D, MAX_LEN, HEADS, ATTN_DIM, LIN_DIM, LAYERS = 1_000_000, 256, 200 + 128, 4, 64, 64, 4
NUM_NEG, TEMP, NUM_BUCKETS = 128, 0.05, 128


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class RelativeBucketedTimeAndPositionBasedBias(nn.Module):
    def __init__(self, max_seq_len, num_buckets):
        super().__init__()
        self._max_seq_len = max_seq_len
        self._ts_w = nn.Parameter(torch.empty(num_buckets + 1).normal_(mean=0, std=0.02))
        self._pos_w = nn.Parameter(torch.empty(2 * max_seq_len - 1).normal_(mean=0, std=0.02))
        self._num_buckets = num_buckets

    def forward(self, all_timestamps):  # (B, N)
        B, N = all_timestamps.shape
        c = self._max_seq_len - 1
        t = F.pad(self._pos_w[c - N + 1 : c + N], [0, N]).repeat(N)
        t = t[..., :-N].reshape(1, N, 3 * N - 2)
        r = (2 * N - 1) // 2
        rel_pos_bias = t[:, :, r:-r]
        ext = torch.cat([all_timestamps, all_timestamps[:, N - 1 : N]], dim=1)
        diff = ext[:, 1:].unsqueeze(2) - ext[:, :-1].unsqueeze(1)
        buckets = torch.clamp((torch.log(torch.abs(diff).clamp(min=1)) / 0.301).long(), 0, self._num_buckets)
        rel_ts_bias = torch.index_select(self._ts_w, dim=0, index=buckets.detach().view(-1)).view(B, N, N)
        return rel_pos_bias + rel_ts_bias


class HSTULayer(nn.Module):
    def __init__(self):
        super().__init__()
        self._uvqk = nn.Parameter(torch.empty(D, (LIN_DIM * 2 + ATTN_DIM * 2) * HEADS).normal_(0, 0.02))
        self._o = nn.Linear(LIN_DIM * HEADS, D)
        nn.init.xavier_uniform_(self._o.weight)
        self._dropout = nn.Dropout(0.2)

    def forward(self, x, rab, mask):  # x (B, n, D); rab (B, n, n); mask (B, n, n) float
        B, n, _ = x.shape
        normed = F.layer_norm(x, [D], eps=1e-6)
        mm = F.silu(torch.matmul(normed, self._uvqk))
        u, v, q, k = torch.split(
            mm, [LIN_DIM * HEADS, LIN_DIM * HEADS, ATTN_DIM * HEADS, ATTN_DIM * HEADS], dim=-1
        )
        qk = torch.einsum("bnhd,bmhd->bhnm", q.view(B, n, HEADS, ATTN_DIM), k.view(B, n, HEADS, ATTN_DIM))
        qk = F.silu(qk + rab.unsqueeze(1)) / n
        qk = qk * mask.unsqueeze(1)
        attn = torch.einsum("bhnm,bmhd->bnhd", qk, v.reshape(B, n, HEADS, LIN_DIM)).reshape(
            B, n, HEADS * LIN_DIM
        )
        o_in = u * F.layer_norm(attn, [HEADS * LIN_DIM], eps=1e-6)
        return self._o(self._dropout(o_in)) + x


class HSTU(nn.Module):
    def __init__(self):
        super().__init__()
        self.item_emb = nn.Embedding(NUM_ITEMS + 1, D, padding_idx=0)
        nn.init.trunc_normal_(self.item_emb.weight, std=0.02)
        self.pos_emb = nn.Embedding(MAX_LEN, D)
        self.rab = RelativeBucketedTimeAndPositionBasedBias(MAX_LEN, NUM_BUCKETS)
        self.layers = nn.ModuleList(HSTULayer() for _ in range(LAYERS))
        self.drop = nn.Dropout(0.2)

    def encode(self, ids, ts, mask):
        n = ids.shape[1]
        x = self.item_emb(ids) * math.sqrt(D) + self.pos_emb(torch.arange(n, device=ids.device))
        x = self.drop(x) * (ids != 0).unsqueeze(-1)
        rab = self.rab(ts)
        for layer in self.layers:
            x = layer(x, rab, mask)
        return F.normalize(x, dim=-1)


def causal_mask(lengths, n):
    valid = torch.arange(n, device=dev).unsqueeze(0) < lengths.unsqueeze(1)  # (B, n)
    tril = torch.tril(torch.ones(n, n, dtype=torch.bool, device=dev))
    return (tril.unsqueeze(0) & valid.unsqueeze(1)).float(), valid


def histories(b, n=200):
    lengths = torch.randint(20, n + 1, (b,), device=dev)
    ids = torch.randint(1, NUM_ITEMS + 1, (b, n), device=dev)
    ids = ids * (torch.arange(n, device=dev).unsqueeze(0) < lengths.unsqueeze(1))
    gaps = torch.distributions.Exponential(torch.tensor(1 / 3600.0, device=dev)).sample((b, n))
    ts = (1.2e9 + torch.cumsum(gaps, 1)).long()
    return ids, ts, lengths


model = HSTU().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=0.0)

# --- phase 1: training with sampled softmax -----------------------------------------------------------------
model.train()
for step in range(10):
    ids, ts, lengths = histories(64)
    mask, valid = causal_mask(lengths, 200)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model.encode(ids, ts, mask)[:, :-1].float()  # predicts the next item
    target = ids[:, 1:]
    tgt_valid = valid[:, 1:].float()
    pos_emb = F.normalize(model.item_emb(target), dim=-1)
    pos_logits = (out * pos_emb).sum(-1) / TEMP  # (B, n-1)
    neg_ids = torch.randint(1, NUM_ITEMS + 1, (64, 199, NUM_NEG), device=dev)
    neg_emb = F.normalize(model.item_emb(neg_ids), dim=-1)
    neg_logits = (out.unsqueeze(2) * neg_emb).sum(-1) / TEMP  # (B, n-1, NUM_NEG)
    neg_logits = torch.where(target.unsqueeze(2) == neg_ids, -5e4, neg_logits)
    logp = F.log_softmax(torch.cat([pos_logits.unsqueeze(2), neg_logits], dim=2), dim=2)[..., 0]
    loss = -(logp * tgt_valid).sum() / tgt_valid.sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
del out, pos_emb, neg_emb, neg_logits, logp, loss
report("phase1 train 64x200")

# --- phase 2: retrieval against the whole catalog -----------------------------------------------------------
model.eval()
CHUNK = 262_144
with torch.no_grad():
    users = []
    for _ in range(8):
        ids, ts, lengths = histories(256)
        mask, _ = causal_mask(lengths, 200)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model.encode(ids, ts, mask).float()
        users.append(out.gather(1, (lengths - 1).view(-1, 1, 1).expand(-1, 1, D)).squeeze(1))
    users = torch.cat(users)  # (2048, D)
    best_s, best_i = None, None
    for start in range(1, NUM_ITEMS + 1, CHUNK):
        items = F.normalize(model.item_emb.weight[start : start + CHUNK], dim=-1)
        s, i = (users @ items.T).topk(200, dim=1)
        i = i + start
        if best_s is None:
            best_s, best_i = s, i
        else:
            best_s, j = torch.cat([best_s, s], 1).topk(200, dim=1)
            best_i = torch.cat([best_i, i], 1).gather(1, j)
    print("retrieved", best_i.shape, best_s[:, 0].mean().item())
    del users, items, s, i
report("phase2 retrieval 2048 users")

# --- phase 3: M-FALCON ranking ------------------------------------------------------------------------------
rank_head = nn.Sequential(nn.Linear(D, 256), nn.SiLU(), nn.Linear(256, 1)).to(dev)
U, CAND, MB, HIST = 64, 512, 128, 200
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    ids, ts, lengths = histories(U, HIST)
    cands = torch.randint(1, NUM_ITEMS + 1, (U, CAND), device=dev)
    hist_mask, valid = causal_mask(lengths, HIST)
    n = HIST + MB
    mask = torch.zeros(U, n, n, device=dev)
    mask[:, :HIST, :HIST] = hist_mask
    mask[:, HIST:, :HIST] = valid.float().unsqueeze(1)  # every candidate sees the whole valid history
    mask[:, HIST:, HIST:] = torch.eye(MB, device=dev)  # and itself, not the other candidates
    scores = []
    for c0 in range(0, CAND, MB):
        seq = torch.cat([ids, cands[:, c0 : c0 + MB]], 1)
        seq_ts = torch.cat([ts, ts.amax(1, keepdim=True).expand(-1, MB) + 60], 1)
        out = model.encode(seq, seq_ts, mask)[:, HIST:]
        scores.append(rank_head(out).squeeze(-1))
    scores = torch.cat(scores, 1)
    top = scores.float().topk(10, dim=1).indices
print("ranked", scores.shape, top[0].tolist())
report("phase3 m-falcon ranking")
