"""Memorizing Transformer (Wu et al., ICLR 2022) as lucidrains' memorizing-transformers-pytorch lays
it out, with its faiss index replaced by an exact search on the GPU: a decoder-only LM (8 layers of
768, 12 heads of 64, vocabulary 32,000, relative-position-free with learned absolute positions) reads
long documents one 512-token segment at a time; layer 6 is a kNN-augmented attention layer with a
per-batch-row external memory of (key, value) pairs (a preallocated (B, 32,768, 12, 64) bf16 ring
buffer for keys and one for values, written with index_copy_ at the ring's write positions after each
segment, detached, plus a validity mask cleared row-wise when a document ends). Queries and keys are
l2-normalised with a learned scale (the paper's / lucidrains' qk-norm); retrieval is an exact top-32
over the whole memory under no_grad, one head at a time ((B, 512, 32,768) bf16 scores a head, masked
where the memory is empty), the 32 neighbours' keys and values gathered into (B, H, 512, 32, 64)
tensors that do take part in the differentiable attention; local causal attention runs through
scaled_dot_product_attention; the two are mixed by a learned per-head sigmoid gate. Training: bf16
autocast, AdamW, each step reads 6 consecutive segments of 4 documents (loss.backward() a segment,
gradients accumulated, one optimizer step), the memory carrying over between segments and steps;
3 steps (documents end and their rows are cleared between steps). Then a no_grad evaluation on 4 new
documents of 12 segments at batch 8 (a fresh memory), the perplexity per segment. Synthetic tokens,
seeded. 2 phases + end."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2842)
dev = "cuda"
VOCAB, DIM, DEPTH, HEADS, DH, SEQ = 32_000, 768, 8, 12, 64, 512
KNN_LAYER, MAX_MEM, TOPK = 6, 32_768, 32


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def l2norm(t):
    return F.normalize(t, dim=-1)


class KNNMemory:
    """One memory per batch row: a ring buffer of detached keys and values."""

    def __init__(self, batch, max_memories, dtype=torch.bfloat16):
        self.keys = torch.zeros(batch, max_memories, HEADS, DH, device=dev, dtype=dtype)
        self.values = torch.zeros(batch, max_memories, HEADS, DH, device=dev, dtype=dtype)
        self.valid = torch.zeros(batch, max_memories, device=dev, dtype=torch.bool)
        self.max_memories = max_memories
        self.write_pos = 0

    def add(self, k, v):  # k, v: (B, N, H, D)
        n = k.shape[1]
        idx = (torch.arange(n, device=dev) + self.write_pos) % self.max_memories
        self.keys.index_copy_(1, idx, k.detach().to(self.keys.dtype))
        self.values.index_copy_(1, idx, v.detach().to(self.values.dtype))
        self.valid[:, idx] = True
        self.write_pos = (self.write_pos + n) % self.max_memories

    def clear(self, rows):  # rows: bool (B,)
        self.valid.masked_fill_(rows[:, None], False)

    @torch.no_grad()
    def search(self, q, topk):  # q: (B, H, N, D) -> indices (B, H, N, topk)
        out = []
        for h in range(q.shape[1]):
            keys_h = self.keys[:, :, h]  # (B, M, D)
            scores = torch.einsum("bnd,bmd->bnm", q[:, h].to(keys_h.dtype), keys_h)
            scores.masked_fill_(~self.valid[:, None, :], float("-inf"))
            out.append(scores.topk(topk, dim=-1).indices)
            del scores
        return torch.stack(out, dim=1)

    def fetch(self, idx):  # idx (B, H, N, K) -> (B, H, N, K, D) keys and values, (B, H, N, K) validity
        b, h, n, k = idx.shape
        flat = idx.permute(0, 2, 3, 1).reshape(b, n * k, h)  # memory slot per head
        head_ix = torch.arange(h, device=dev).expand(b, n * k, h)
        batch_ix = torch.arange(b, device=dev)[:, None, None].expand(b, n * k, h)
        km = self.keys[batch_ix, flat, head_ix]  # (B, N*K, H, D)
        vm = self.values[batch_ix, flat, head_ix]
        ok = self.valid[batch_ix, flat]  # (B, N*K, H): is each head's neighbour a written slot
        km = km.reshape(b, n, k, h, DH).permute(0, 3, 1, 2, 4)
        vm = vm.reshape(b, n, k, h, DH).permute(0, 3, 1, 2, 4)
        return km, vm, ok.reshape(b, n, k, h).permute(0, 3, 1, 2)


class Attention(nn.Module):
    def __init__(self, knn=False):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.to_qkv = nn.Linear(DIM, 3 * HEADS * DH, bias=False)
        self.to_out = nn.Linear(HEADS * DH, DIM, bias=False)
        self.knn = knn
        if knn:
            self.scale = nn.Parameter(torch.ones(HEADS, 1, 1) * math.log(16.0))
            self.gate_bias = nn.Parameter(torch.zeros(HEADS, 1, 1))

    def forward(self, x, memory=None):
        b, n, _ = x.shape
        q, k, v = self.to_qkv(self.norm(x)).view(b, n, 3, HEADS, DH).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, N, D)
        if not self.knn:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            q, k = l2norm(q), l2norm(k)
            scale = self.scale.exp()
            local = F.scaled_dot_product_attention(q * scale, k, v, is_causal=True, scale=1.0)
            idx = memory.search(q, TOPK)
            km, vm, ok = memory.fetch(idx)
            sim_mem = torch.einsum("bhnd,bhnkd->bhnk", q, km.to(q.dtype)) * scale
            sim_mem = sim_mem.masked_fill(~ok, torch.finfo(sim_mem.dtype).min)
            attn_mem = sim_mem.softmax(dim=-1)
            mem_out = torch.einsum("bhnk,bhnkd->bhnd", attn_mem, vm.to(attn_mem.dtype))
            has_mem = ok.any(-1, keepdim=True)
            gate = torch.sigmoid(self.gate_bias) * has_mem
            out = local * (1 - gate) + mem_out * gate
            memory.add(k.transpose(1, 2), v.transpose(1, 2))
        out = out.transpose(1, 2).reshape(b, n, HEADS * DH)
        return self.to_out(out)


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(DIM), nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM)
        )

    def forward(self, x):
        return self.net(x)


class MemorizingTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.token_emb = nn.Embedding(VOCAB, DIM)
        self.pos_emb = nn.Embedding(SEQ, DIM)
        self.layers = nn.ModuleList(
            [nn.ModuleList([Attention(knn=(i + 1 == KNN_LAYER)), FeedForward()]) for i in range(DEPTH)]
        )
        self.norm = nn.LayerNorm(DIM)
        self.to_logits = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids, memory):
        x = self.token_emb(ids) + self.pos_emb(torch.arange(ids.shape[1], device=dev))
        for attn, ff in self.layers:
            x = x + attn(x, memory if attn.knn else None)
            x = x + ff(x)
        return self.to_logits(self.norm(x))


def document(batch, segments, gen):
    # token streams with long-range repeats, so retrieval has something to find
    base = torch.randint(0, VOCAB, (batch, SEQ * 2), device=dev, generator=gen)
    reps = base.repeat(1, segments // 2 + 1)[:, : SEQ * segments + 1]
    noise = torch.randint(0, VOCAB, reps.shape, device=dev, generator=gen)
    keep = torch.rand(reps.shape, device=dev, generator=gen) < 0.7
    return torch.where(keep, reps, noise)


model = MemorizingTransformer().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95))
gen = torch.Generator(device=dev)
gen.manual_seed(2842)
B, SEGMENTS = 4, 6
memory = KNNMemory(B, MAX_MEM)
print("params", sum(p.numel() for p in model.parameters()))
report("setup")

model.train()
for step in range(3):
    data = document(B, SEGMENTS, gen)
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for s in range(SEGMENTS):
        seg = data[:, s * SEQ : (s + 1) * SEQ + 1]
        inp, tgt = seg[:, :-1], seg[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(inp, memory)
            loss = F.cross_entropy(logits.float().view(-1, VOCAB), tgt.reshape(-1)) / SEGMENTS
        loss.backward()
        total += loss.item()
        del logits, loss
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    # documents end: clear every row's memory (lucidrains' knn_memories.clear_memory(batch_indices))
    memory.clear(torch.ones(B, dtype=torch.bool, device=dev))
    print(f"step {step} loss {total:.4f} mem_valid {int(memory.valid.sum().item())}")
report("train")

model.eval()
EB, ESEG = 8, 12
eval_memory = KNNMemory(EB, MAX_MEM)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    data = document(EB, ESEG, gen)
    ppl = []
    for s in range(ESEG):
        seg = data[:, s * SEQ : (s + 1) * SEQ + 1]
        logits = model(seg[:, :-1], eval_memory)
        nll = F.cross_entropy(logits.float().view(-1, VOCAB), seg[:, 1:].reshape(-1))
        ppl.append(math.exp(min(nll.item(), 20.0)))
        del logits
    print("eval ppl", [f"{p:.1f}" for p in ppl[:3]], "...", f"{ppl[-1]:.1f}")
del eval_memory
report("eval")
print("done")
