"""Expert-choice routing (Zhou et al. 2022, "Mixture-of-Experts with Expert Choice Routing") written by
hand in a small decoder-free transformer encoder: the router scores every token for every expert,
softmax over experts, and each expert then picks its top-k tokens along the token axis (k = capacity
factor * tokens / experts), so load is balanced by construction and some tokens get no expert. The
chosen tokens are gathered into an (experts, k, d) tensor, the experts' weights are stacked
parameters applied with torch.bmm, and outputs are weighted by the gate and summed back with
index_add_ into the token stream. Attention is F.scaled_dot_product_attention. Training under bf16
autocast with fused AdamW.

Phases: 0 model built (8 layers, d=512, 16 experts of 4*d); 1 training steps on 16 x 1024 tokens at
capacity factor 2; 2 evaluation at capacity factors 1, 2 and 4 under no_grad, with the fraction of
tokens dropped by every expert; 3 bf16 cast of the whole model and inference_mode scoring of a larger
batch."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(11)
device = "cuda"


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class ExpertChoiceMoE(nn.Module):
    def __init__(self, d, n_exp, hidden):
        super().__init__()
        self.router = nn.Linear(d, n_exp, bias=False)
        self.w1 = nn.Parameter(torch.randn(n_exp, d, hidden) * d**-0.5)
        self.w2 = nn.Parameter(torch.randn(n_exp, hidden, d) * hidden**-0.5)
        self.n_exp = n_exp
        self.capacity = 2.0

    def forward(self, x):
        shp = x.shape
        x = x.reshape(-1, shp[-1])
        n = x.shape[0]
        k = int(self.capacity * n / self.n_exp)
        probs = self.router(x).float().softmax(-1)  # n, E
        gates, idx = probs.t().topk(k, dim=-1)  # E, k: each expert picks its tokens
        xe = x[idx]  # E, k, d
        h = F.gelu(torch.bmm(xe, self.w1.to(xe.dtype)))
        ye = torch.bmm(h, self.w2.to(h.dtype)) * gates[..., None].to(h.dtype)
        out = torch.zeros_like(x).index_add_(0, idx.reshape(-1), ye.reshape(-1, shp[-1]).to(x.dtype))
        self.covered = torch.zeros(n, device=x.device).index_add_(
            0, idx.reshape(-1), torch.ones(idx.numel(), device=x.device)
        )
        return out.view(shp)


class Layer(nn.Module):
    def __init__(self, d, heads, n_exp):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.heads = heads
        self.moe = ExpertChoiceMoE(d, n_exp, 4 * d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
        return x + self.moe(self.ln2(x))


class Model(nn.Module):
    def __init__(self, vocab=32000, d=512, layers=8, heads=8, n_exp=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1024, d))
        self.layers = nn.ModuleList(Layer(d, heads, n_exp) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tok):
        x = self.emb(tok) + self.pos[: tok.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x))


model = Model().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
print("params", sum(p.numel() for p in model.parameters()))
report("phase0 build")

for step in range(5):
    tok = torch.randint(0, 32000, (16, 1024), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(tok[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tok[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("train loss", loss.item())
report("phase1 train")

model.eval()
tok = torch.randint(0, 32000, (16, 1024), device=device)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for cf in (1.0, 2.0, 4.0):
        for layer in model.layers:
            layer.moe.capacity = cf
        logits = model(tok[:, :-1])
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tok[:, 1:].reshape(-1))
        dropped = torch.stack([(layer.moe.covered == 0).float().mean() for layer in model.layers])
        print(f"cf {cf}: nll {nll.item():.3f} dropped {dropped.mean().item():.3f}")
report("phase2 capacity sweep")

model.to(torch.bfloat16)
for layer in model.layers:
    layer.moe.capacity = 2.0
with torch.inference_mode():
    tok = torch.randint(0, 32000, (24, 1024), device=device)
    logp = model(tok[:, :-1]).float().log_softmax(-1)
    score = logp.gather(-1, tok[:, 1:, None]).squeeze(-1).sum(-1)
print("scores", score.shape, score.mean().item())
report("phase3 bf16 inference")
