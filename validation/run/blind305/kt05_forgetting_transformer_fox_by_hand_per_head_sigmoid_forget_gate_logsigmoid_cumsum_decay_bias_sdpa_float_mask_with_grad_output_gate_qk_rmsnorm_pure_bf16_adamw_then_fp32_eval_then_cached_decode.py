"""Forgetting Transformer (FoX; Lin et al. 2025, "Forgetting Transformer: Softmax Attention with a
Forget Gate") written by hand without its Triton kernel: each head has a scalar forget gate
f_t = sigmoid(w_f . x_t + b_f); with c = cumsum(logsigmoid(.)) over time, the attention logits get the
bias D_ij = c_i - c_j for j <= i (and -inf above the diagonal), built by broadcasting and passed to
F.scaled_dot_product_attention as a float attn_mask that carries gradient (the gate is learned through
it). "FoX (Pro)" extras: an output gate (sigmoid of a projection, multiplied into the attention output),
RMSNorm on queries and keys (nn.RMSNorm over the head dimension), no positional embedding at all.

Phases: (1) a 12-layer, 768-wide, 12-head model built in bf16 ("pure bf16": parameters, gradients and
AdamW state all bf16, foreach=False); (2) three training steps at batch 4 x 2048 with
clip_grad_value_; (3) a float32 copy of the weights (load_state_dict into a fresh fp32 model) evaluated
at 3072 tokens (length extrapolation) under no_grad; (4) decoding with a KV cache grown by torch.cat and
a running cumulative log-forget state per head: a 512-token prefill then 48 greedy tokens at batch 8,
each step's bias row c_t - c_j as a (B, H, 1, L) float mask, bf16 weights under inference_mode."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(30505)
device = "cuda" if torch.cuda.is_available() else "cpu"
VOCAB, D, HEADS, LAYERS = 50304, 768, 12, 12
HD = D // HEADS
B, T, T_EVAL, B_EVAL, GEN_B, PROMPT, NEW = 4, 2048, 3072, 2, 8, 512, 48


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class FoxAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.fgate = nn.Linear(D, HEADS, bias=True)
        self.ogate = nn.Linear(D, D, bias=False)
        self.q_norm = nn.RMSNorm(HD, eps=1e-6)
        self.k_norm = nn.RMSNorm(HD, eps=1e-6)
        self.out = nn.Linear(D, D, bias=False)
        with torch.no_grad():
            self.fgate.bias.uniform_(1.0, 6.0)  # forget gates start near 1: long memory

    def heads(self, x):
        Bx, Tx, _ = x.shape
        q, k, v = self.qkv(x).view(Bx, Tx, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        return self.q_norm(q), self.k_norm(k), v

    def log_forget(self, x):
        return F.logsigmoid(self.fgate(x).float()).transpose(1, 2)  # (B, H, T)

    def finish(self, a, x):
        Bx, Tx, _ = x.shape
        a = a.transpose(1, 2).reshape(Bx, Tx, D)
        return self.out(a * torch.sigmoid(self.ogate(x)))

    def forward(self, x):
        Tx = x.shape[1]
        q, k, v = self.heads(x)
        c = self.log_forget(x).cumsum(-1)
        bias = c[..., :, None] - c[..., None, :]
        causal = torch.ones(Tx, Tx, dtype=torch.bool, device=x.device).tril()
        bias = bias.masked_fill(~causal, float("-inf")).to(q.dtype)
        return self.finish(F.scaled_dot_product_attention(q, k, v, attn_mask=bias), x)

    def step(self, x, cache):
        """x: (B, t, D) new tokens; cache: k, v (B, H, L, HD) and c (B, H, L), the cumulative log-forget."""
        Tx = x.shape[1]
        q, k, v = self.heads(x)
        lf = self.log_forget(x)
        start = cache["c"][..., -1:] if cache["c"] is not None else torch.zeros_like(lf[..., :1])
        c_new = start + lf.cumsum(-1)
        keys = k if cache["k"] is None else torch.cat([cache["k"], k], dim=2)
        values = v if cache["v"] is None else torch.cat([cache["v"], v], dim=2)
        c_all = c_new if cache["c"] is None else torch.cat([cache["c"], c_new], dim=-1)
        L = keys.shape[2]
        bias = c_new[..., :, None] - c_all[..., None, :]
        allowed = torch.ones(Tx, L, dtype=torch.bool, device=x.device).tril(L - Tx)
        bias = bias.masked_fill(~allowed, float("-inf")).to(q.dtype)
        cache.update(k=keys, v=values, c=c_all)
        return self.finish(F.scaled_dot_product_attention(q, keys, values, attn_mask=bias), x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.attn = FoxAttention()
        self.fc1 = nn.Linear(D, 2 * (8 * D // 3), bias=False)  # SwiGLU, hidden 2048
        self.fc2 = nn.Linear(self.fc1.out_features // 2, D, bias=False)

    def mlp(self, x):
        a, g = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(F.silu(g) * a)

    def forward(self, x, cache=None):
        h = self.n1(x)
        x = x + (self.attn(h) if cache is None else self.attn.step(h, cache))
        return x + self.mlp(self.n2(x))


class Fox(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(D)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids, caches=None):
        x = self.emb(ids)
        for i, blk in enumerate(self.blocks):
            x = blk(x, None if caches is None else caches[i])
        return self.lm_head(self.norm(x))


model = Fox().to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
print(f"parameters {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
report("built pure bf16")

for step in range(3):
    ids = torch.randint(0, VOCAB, (B, T + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.view(-1, VOCAB).float(), ids[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
del logits, loss, ids
report("pure bf16 training")

fp32 = Fox().to(device)
fp32.load_state_dict(model.state_dict())
fp32.eval()
with torch.no_grad():
    ids = torch.randint(0, VOCAB, (B_EVAL, T_EVAL + 1), device=device)
    nll = F.cross_entropy(fp32(ids[:, :-1]).view(-1, VOCAB), ids[:, 1:].reshape(-1), reduction="none").view(
        B_EVAL, -1
    )
print(
    f"eval at {T_EVAL}: loss first half {nll[:, : T_EVAL // 2].mean().item():.4f} "
    f"second {nll[:, T_EVAL // 2 :].mean().item():.4f}"
)
del fp32, nll, ids
report("fp32 copy eval at 3072")

model.eval()
caches = [{"k": None, "v": None, "c": None} for _ in range(LAYERS)]
with torch.inference_mode():
    tokens = torch.randint(0, VOCAB, (GEN_B, PROMPT), device=device)
    generated = []
    for _ in range(NEW):
        nxt = model(tokens, caches)[:, -1].argmax(-1, keepdim=True)
        generated.append(nxt)
        tokens = nxt
    out = torch.cat(generated, dim=1)
print(f"generated {tuple(out.shape)} cache length {caches[0]['k'].shape[2]}")
report("cached decode with forget-gate state")
