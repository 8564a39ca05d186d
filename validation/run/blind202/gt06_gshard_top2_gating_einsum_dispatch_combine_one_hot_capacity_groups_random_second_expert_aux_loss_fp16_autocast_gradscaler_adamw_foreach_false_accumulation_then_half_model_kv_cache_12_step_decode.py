"""GShard-style top-2 gating with dense dispatch and combine tensors (Lepikhin et al. 2020), written by hand.

Model: a decoder-only LM of 6 pre-LN blocks of width 768 (12 heads, causal SDPA), vocabulary 32,000, context
512, tied embeddings; every second block's MLP is a GShard MoE layer of 16 ReLU experts (768 -> 3,072 ->
768, stacked weights wi (16, 768, 3,072), wo (16, 3,072, 768)). Tokens are split into groups of 1,024 (one
group of all the step's tokens when fewer, as in decoding); per group the softmax gate picks the top-1
expert and the best other expert, the second kept only with probability min(1, 2 * g2) (random routing, a
uniform draw); each expert has capacity 2 * group / experts; the positions in each expert's buffer come from
a cumsum over the one-hot masks (the second expert's positions start after all first choices), tokens over
capacity are dropped; the (groups, tokens, experts, capacity) dispatch and combine tensors are built from
one_hot products, and dispatch, the experts and combine are einsums ("gsec,gsm->egcm", "egcm,emh->egch",
"egch,ehm->egcm", "gsec,egcm->gsm" (four in all)). The auxiliary loss is mean(m_e * c_e) * E^2 (coefficient
0.01).

Training: fp32 weights, fp16 autocast with GradScaler, AdamW(foreach=False, lr 5e-4), gradient accumulation
over 2 micro-batches of 8 x 512, clip at 1.0 after unscale_. Then a no_grad evaluation loss at batch 16.
Then inference: the optimizer deleted, empty_cache, the model cast by .half(), torch.inference_mode, a KV
cache grown by torch.cat over 12 greedy steps after a prompt of 16 x 128. Phases: the first step; 2 more
steps; the no_grad evaluation; the prefill; the 12 decoding steps. 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2020)
if SMALL:
    D, HEADS, LAYERS, VOCAB, T, MB, N_EXPERT, GROUP, PROMPT = 64, 4, 2, 300, 32, 2, 4, 32, 8
else:
    D, HEADS, LAYERS, VOCAB, T, MB, N_EXPERT, GROUP, PROMPT = 768, 12, 6, 32000, 512, 8, 16, 1024, 128
D_FF, ACCUM, NEW = 4 * D, 2, 12
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
        torch.cuda.reset_peak_memory_stats()


class GShardMoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.wg = nn.Linear(D, N_EXPERT, bias=False)
        self.wi = nn.Parameter(torch.randn(N_EXPERT, D, D_FF) * D**-0.5)
        self.wo = nn.Parameter(torch.randn(N_EXPERT, D_FF, D) * D_FF**-0.5)

    def forward(self, x):
        shape = x.shape
        n = x.numel() // D
        tokens = x.reshape(-1, GROUP if n % GROUP == 0 else n, D)  # (G, S, M)
        s = tokens.shape[1]
        capacity = 2 * s // N_EXPERT
        gates = self.wg(tokens).float().softmax(-1)  # (G, S, E)
        idx1 = gates.argmax(-1)
        mask1 = F.one_hot(idx1, N_EXPERT).float()
        gates_wo1 = gates * (1.0 - mask1)
        idx2 = gates_wo1.argmax(-1)
        mask2 = F.one_hot(idx2, N_EXPERT).float()

        density = mask1.mean(1)
        density_proxy = gates.mean(1)
        aux = (density * density_proxy).mean() * N_EXPERT * N_EXPERT

        g1 = (gates * mask1).sum(-1)
        g2 = (gates * mask2).sum(-1)
        if self.training:
            keep2 = torch.rand_like(g2) < (2 * g2).clamp(max=1.0)
            mask2 = mask2 * keep2.unsqueeze(-1)

        pos1 = (torch.cumsum(mask1, dim=1) - 1) * mask1
        mask1 = mask1 * (pos1 < capacity)
        count1 = mask1.sum(1, keepdim=True)
        pos2 = (torch.cumsum(mask2, dim=1) - 1 + count1) * mask2
        mask2 = mask2 * (pos2 < capacity)

        g1 = g1 * mask1.sum(-1)
        g2 = g2 * mask2.sum(-1)
        denom = (g1 + g2).clamp(min=1e-9)
        g1, g2 = g1 / denom, g2 / denom

        loc1 = F.one_hot((pos1 * mask1).sum(-1).long(), capacity).float()
        loc2 = F.one_hot((pos2 * mask2).sum(-1).long(), capacity).float()
        combine = g1[..., None, None] * mask1.unsqueeze(-1) * loc1.unsqueeze(2) + g2[
            ..., None, None
        ] * mask2.unsqueeze(-1) * loc2.unsqueeze(2)  # (G, S, E, C)
        dispatch = combine.gt(0).to(tokens.dtype)

        expert_in = torch.einsum("gsec,gsm->egcm", dispatch, tokens)
        h = F.relu(torch.einsum("egcm,emh->egch", expert_in, self.wi.to(expert_in.dtype)))
        expert_out = torch.einsum("egch,ehm->egcm", h, self.wo.to(h.dtype))
        out = torch.einsum("gsec,egcm->gsm", combine.to(expert_out.dtype), expert_out)
        return out.reshape(shape), aux


class Block(nn.Module):
    def __init__(self, moe):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.moe = moe
        self.mlp = GShardMoE() if moe else nn.Sequential(nn.Linear(D, D_FF), nn.ReLU(), nn.Linear(D_FF, D))

    def forward(self, x, cache=None):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4).unbind(0)
        if cache is not None:
            if cache:
                k = torch.cat([cache[0], k], dim=2)
                v = torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        if self.moe:
            h, aux = self.mlp(self.ln2(x))
        else:
            h, aux = self.mlp(self.ln2(x)), None
        return x + h, aux


class GShardLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.wpe = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block(moe=i % 2 == 1) for i in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)

    def forward(self, idx, caches=None, pos=0):
        x = self.wte(idx) + self.wpe(torch.arange(pos, pos + idx.shape[1], device=idx.device))
        aux_total = 0.0
        for i, blk in enumerate(self.blocks):
            x, aux = blk(x, None if caches is None else caches[i])
            if aux is not None:
                aux_total = aux_total + aux
        return F.linear(self.ln_f(x), self.wte.weight), aux_total


model = GShardLM().to(device)
print(f"parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, foreach=False)
scaler = torch.amp.GradScaler("cuda", enabled=amp)


def lm_loss(bs):
    data = torch.randint(0, VOCAB, (bs, T + 1), device=device)
    logits, aux = model(data[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), data[:, 1:].reshape(-1)), aux


def train_step():
    total = 0.0
    for _ in range(ACCUM):
        with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=amp):
            ce, aux = lm_loss(MB)
            loss = (ce + 0.01 * aux) / ACCUM
        scaler.scale(loss).backward()  # noqa: F821 (deleted before inference)
        total += ce.item() / ACCUM
    scaler.unscale_(opt)  # noqa: F821
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)  # noqa: F821
    scaler.update()  # noqa: F821
    opt.zero_grad(set_to_none=True)  # noqa: F821
    return total


model.train()
print(f"step 0 loss {train_step():.4f} scale {scaler.get_scale()}")
report("first step")
for step in (1, 2):
    print(f"step {step} loss {train_step():.4f} scale {scaler.get_scale()}")
report("train")

model.eval()
with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.float16, enabled=amp):
    ce, _ = lm_loss(2 * MB)
print(f"eval loss {ce.item():.4f}")
report("eval")

del opt, scaler
if device == "cuda":
    torch.cuda.empty_cache()
model.half()
caches = [[] for _ in range(LAYERS)]
with torch.inference_mode():
    prompt = torch.randint(0, VOCAB, (2 * MB, PROMPT), device=device)
    logits, _ = model(prompt, caches, 0)
    nxt = logits[:, -1:].argmax(-1)
    report("prefill")
    generated = [nxt]
    for i in range(NEW - 1):
        logits, _ = model(nxt, caches, PROMPT + i)
        nxt = logits[:, -1:].argmax(-1)
        generated.append(nxt)
print(f"generated {tuple(torch.cat(generated, 1).shape)}")
report("decode")
