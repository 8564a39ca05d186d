"""A ViT-S/16 at 224 x 224 with expert-choice routing MoE layers (Zhou et al. 2022, "Mixture-of-Experts
with Expert Choice Routing") in every other block: 8 experts of width 1,536, token-to-expert affinity
by softmax over experts, each expert choosing its k = n * 2 / 8 tokens (capacity factor 2) by topk
over the batch's tokens, the chosen tokens gathered by index_select, the experts batched with bmm
over stacked weights, the outputs weighted by their gates and summed back into the tokens with
index_add_; SDPA attention, a class token; fp16 autocast with a GradScaler (init scale 2 ** 12),
Adam, the gradients unscaled and clipped at 1.0, batch 96, 3 steps; then inference_mode evaluation
under fp16 autocast at batch 192 with the same capacity; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14702)
RES, PATCH, D, HEADS, DEPTH, E, FF, NCLS, B, EB = (
    (32, 16, 32, 2, 2, 4, 64, 10, 4, 8) if SMALL else (224, 16, 384, 6, 12, 8, 1536, 1000, 96, 192)
)
CF = 2.0
device = "cuda" if torch.cuda.is_available() else "cpu"


class ExpertChoiceMoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(D, E, bias=False)
        self.w1 = nn.Parameter(torch.randn(E, D, FF) * D**-0.5)
        self.b1 = nn.Parameter(torch.zeros(E, 1, FF))
        self.w2 = nn.Parameter(torch.randn(E, FF, D) * FF**-0.5)
        self.b2 = nn.Parameter(torch.zeros(E, 1, D))

    def forward(self, x):
        b, t, d = x.shape
        tokens = x.reshape(b * t, d)
        n = tokens.shape[0]
        k = int(n * CF / E)
        scores = self.gate(tokens).softmax(dim=-1)  # n, E
        g, idx = torch.topk(scores.t(), k, dim=-1)  # E, k: each expert picks its tokens
        xe = tokens.index_select(0, idx.reshape(-1)).view(E, k, d)
        h = F.gelu(torch.baddbmm(self.b1, xe, self.w1))
        ye = torch.baddbmm(self.b2, h, self.w2) * g.unsqueeze(-1).to(h.dtype)
        out = torch.zeros_like(tokens)
        out.index_add_(0, idx.reshape(-1), ye.reshape(E * k, d).to(out.dtype))
        return out.view(b, t, d)


class Block(nn.Module):
    def __init__(self, moe):
        super().__init__()
        self.n1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.n2 = nn.LayerNorm(D)
        self.mlp = (
            ExpertChoiceMoE() if moe else nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        )

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.n2(x))


class VMoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, PATCH, PATCH)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(1, (RES // PATCH) ** 2 + 1, D) * 0.02)
        self.blocks = nn.Sequential(*[Block(moe=i % 2 == 1) for i in range(DEPTH)])
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, NCLS)

    def forward(self, img):
        x = self.patch(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


model = VMoE().to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
opt = torch.optim.Adam(model.parameters(), lr=3e-4)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**12, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    img = torch.randn(B, 3, RES, RES, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(img), y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} gnorm {gnorm.item():.3f} scale {scaler.get_scale():.0f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss, img, y
model.eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    for _ in range(2):
        img = torch.randn(EB, 3, RES, RES, device=device)
        y = torch.randint(0, NCLS, (EB,), device=device)
        correct += (model(img).argmax(-1) == y).sum().item()
if device == "cuda":
    print(
        f"eval top1 {correct / (2 * EB):.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
