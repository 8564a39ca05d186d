"""A V-MoE-style vision transformer with expert-choice routing (Zhou et al. 2022), written by hand.

Model: ViT-S/16-like at 224 px (patch embedding by a stride-16 Conv2d, class token, learned positions),
width 512, 8 pre-LN blocks of 8 heads (SDPA), 1,000 classes. Every second block's MLP is an expert-choice
MoE layer: 16 GELU experts (512 -> 2,048 -> 512) held as stacked parameters w1 (16, 512, 2,048), w2 (16,
2,048, 512) with biases. The router's softmax over experts gives a (tokens, experts) score matrix over the
whole batch's tokens; each expert picks its top k = capacity_factor * tokens / experts tokens (capacity
factor 2) with topk over the token dimension, gathers them (index_select into (experts, k, width)), runs
them through torch.einsum with its weights, scales by the scores and the outputs are summed back per token
with scatter_add_ (a token may be picked by several experts or none). Forward hooks on the routers keep each
step's expert load (the number of distinct tokens chosen, detached) for logging.

Training: fp32 weights, fp16 autocast with torch.amp.GradScaler (default init scale), Adam (lr 1e-3, foreach
default), label smoothing 0.1, batch 96 random images; GradScaler.unscale_ then clip_grad_norm_ at 1.0.
Phases: the first step; 3 more steps; inference_mode evaluation at batch 256 under fp16 autocast (top-1
accuracy against random labels). 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2022)
if SMALL:
    IMG, D, DEPTH, HEADS, N_EXPERT, B, EVAL_B, N_CLASSES = 32, 64, 2, 4, 4, 4, 8, 10
else:
    IMG, D, DEPTH, HEADS, N_EXPERT, B, EVAL_B, N_CLASSES = 224, 512, 8, 8, 16, 96, 256, 1000
PATCH, D_FF, CAPACITY_FACTOR = 16, 4 * D, 2.0
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class ExpertChoiceMoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D, N_EXPERT, bias=False)
        self.w1 = nn.Parameter(torch.empty(N_EXPERT, D, D_FF))
        self.b1 = nn.Parameter(torch.zeros(N_EXPERT, 1, D_FF))
        self.w2 = nn.Parameter(torch.empty(N_EXPERT, D_FF, D))
        self.b2 = nn.Parameter(torch.zeros(N_EXPERT, 1, D))
        nn.init.trunc_normal_(self.w1, std=0.02)
        nn.init.trunc_normal_(self.w2, std=0.02)

    def forward(self, x):
        b, t, d = x.shape
        tokens = x.reshape(-1, d)
        n = tokens.shape[0]
        k = int(CAPACITY_FACTOR * n / N_EXPERT)
        scores = self.router(tokens).float().softmax(dim=-1)  # (n, E)
        gates, idx = torch.topk(scores.t(), k, dim=-1)  # (E, k)
        xin = tokens.index_select(0, idx.reshape(-1)).view(N_EXPERT, k, d)
        h = F.gelu(torch.einsum("ekd,edf->ekf", xin, self.w1) + self.b1)
        h = torch.einsum("ekf,efd->ekd", h, self.w2) + self.b2
        h = h * gates.unsqueeze(-1).to(h.dtype)
        out = torch.zeros(n, d, device=x.device, dtype=h.dtype)
        out.scatter_add_(0, idx.reshape(-1, 1).expand(-1, d), h.reshape(-1, d))
        return out.view(b, t, d).to(x.dtype)


class Block(nn.Module):
    def __init__(self, moe):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = (
            ExpertChoiceMoE() if moe else nn.Sequential(nn.Linear(D, D_FF), nn.GELU(), nn.Linear(D_FF, D))
        )

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, D))
        return x + self.mlp(self.ln2(x))


class VMoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, PATCH, PATCH)
        n_patches = (IMG // PATCH) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(1, n_patches + 1, D) * 0.02)
        self.blocks = nn.ModuleList(Block(moe=i % 2 == 1) for i in range(DEPTH))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, N_CLASSES)

    def forward(self, img):
        x = self.patch(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x[:, 0]))


model = VMoE().to(device)
print(f"parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")

expert_load = {}


def make_hook(name):
    def hook(module, inputs, output):
        with torch.no_grad():
            n = inputs[0].shape[0]
            k = int(CAPACITY_FACTOR * n / N_EXPERT)
            chosen = torch.topk(output.float().softmax(-1).t(), k, dim=-1).indices
            expert_load[name] = torch.unique(chosen).numel() / n

    return hook


for name, m in model.named_modules():
    if isinstance(m, ExpertChoiceMoE):
        m.router.register_forward_hook(make_hook(name))

opt = torch.optim.Adam(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda", enabled=amp)


def train_step():
    img = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, N_CLASSES, (B,), device=device)
    with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=amp):
        loss = F.cross_entropy(model(img), y, label_smoothing=0.1)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"step 0 loss {train_step():.4f} scale {scaler.get_scale()}")
print("token coverage per MoE layer: " + ", ".join(f"{v:.2f}" for v in expert_load.values()))
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, 4):
    loss = train_step()
    print(f"step {step} loss {loss:.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.inference_mode(), torch.autocast(device_type="cuda", dtype=torch.float16, enabled=amp):
    img = torch.randn(EVAL_B, 3, IMG, IMG, device=device)
    y = torch.randint(0, N_CLASSES, (EVAL_B,), device=device)
    correct = (model(img).argmax(-1) == y).sum().item()
print(f"eval top-1 {correct / EVAL_B:.4f}")
if device == "cuda":
    peak = torch.cuda.max_memory_allocated()
    print(f"eval peak {peak / 2**30:.2f} GiB, allocated {torch.cuda.memory_allocated()}")
