"""Reversible Vision Transformer (Mangalam et al., CVPR 2022) trained the way its reference code
(karttikeya/minREV's rev_vit.py, the same RevBackProp as facebookresearch/SlowFast's reversible MViT)
writes it: the patch embedding's tokens are duplicated into two streams (cat([x, x], -1)) and every
block is a two-stream reversible coupling Y1 = X1 + DropPath(Attn(LN(X2))), Y2 = X2 + DropPath(MLP(LN(Y1))).
The blocks run inside a torch.autograd.Function (RevBackProp) whose forward (under the Function's
implicit no_grad) keeps only the final two halves (save_for_backward of X1.detach(), X2.detach()), so no
activation of any block is held; its backward walks the blocks in reverse and, for each, re-enables
grad, sets Y1.requires_grad = True, recomputes G(Y1) and calls .backward(dY2, retain_graph=True) inside
the outer backward (a nested backward), reconstructs X2 = Y2 - G(Y1) under no_grad, does the same for
F(X2), and hands dX1, dX2 on; the drop-path masks are redrawn identically from per-block seeds set with
torch.manual_seed before every F and G call. Attention is written by hand (q @ k^T * scale, softmax,
@ v) as minREV does; no CLS token, mean pooling, a LayerNorm'd head. ViT-B/16 (768 x 12 heads, depth
12) at 224 x 224, fp32 with TF32 matmuls, AdamW with weight decay groups.
Phase 1: 3 steps at batch 64 with the reversible backward. Phase 2: one step of the same model at
batch 64 with ordinary autograd through the blocks (minREV's use_vanilla_backward switch, the baseline
the paper compares against). Phase 3: inference_mode evaluation at batch 256. Synthetic data, seeded.
3 phases + end."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import Function

torch.manual_seed(2841)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
dev = "cuda"
IMG, PATCH, DIM, HEADS, DEPTH, CLASSES = 224, 16, 768, 12, 12, 1000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def drop_path(x, drop_prob=0.0, training=False):
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    mask = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
    mask.floor_()
    return x.div(keep_prob) * mask


class AttentionSubBlock(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.num_heads, self.scale = num_heads, (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        x = self.norm(x)
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(x)


class MLPSubblock(nn.Module):
    def __init__(self, dim, mlp_ratio=4):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, dim * mlp_ratio)
        self.fc2 = nn.Linear(dim * mlp_ratio, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(self.norm(x))))


class ReversibleBlock(nn.Module):
    def __init__(self, dim, num_heads, drop_path_rate, index):
        super().__init__()
        self.drop_path_rate = drop_path_rate
        self.F = AttentionSubBlock(dim, num_heads)
        self.G = MLPSubblock(dim)
        self.index = index
        self.seeds = {}

    def seed_cuda(self, key, step):
        # minREV draws a fresh seed from the device generator here; a fixed per-block seed keeps this
        # script reproducible and redraws the same drop-path masks in the backward
        self.seeds[key] = 10_000 * step + 100 * self.index + {"attn": 1, "ffn": 2, "droppath": 3}[key]
        torch.manual_seed(self.seeds[key])

    def forward(self, X_1, X_2, step=0):
        self.seed_cuda("attn", step)
        f_X_2 = self.F(X_2)
        self.seed_cuda("droppath", step)
        f_X_2_dropped = drop_path(f_X_2, drop_prob=self.drop_path_rate, training=self.training)
        Y_1 = X_1 + f_X_2_dropped
        del X_1
        self.seed_cuda("ffn", step)
        g_Y_1 = self.G(Y_1)
        torch.manual_seed(self.seeds["droppath"])
        g_Y_1_dropped = drop_path(g_Y_1, drop_prob=self.drop_path_rate, training=self.training)
        Y_2 = X_2 + g_Y_1_dropped
        del X_2
        return Y_1, Y_2

    def backward_pass(self, Y_1, Y_2, dY_1, dY_2):
        with torch.enable_grad():
            Y_1.requires_grad = True
            torch.manual_seed(self.seeds["ffn"])
            g_Y_1 = self.G(Y_1)
            torch.manual_seed(self.seeds["droppath"])
            g_Y_1 = drop_path(g_Y_1, drop_prob=self.drop_path_rate, training=self.training)
            g_Y_1.backward(dY_2, retain_graph=True)
        with torch.no_grad():
            X_2 = Y_2 - g_Y_1
            del g_Y_1
            dY_1 = dY_1 + Y_1.grad
            Y_1.grad = None
        with torch.enable_grad():
            X_2.requires_grad = True
            torch.manual_seed(self.seeds["attn"])
            f_X_2 = self.F(X_2)
            torch.manual_seed(self.seeds["droppath"])
            f_X_2 = drop_path(f_X_2, drop_prob=self.drop_path_rate, training=self.training)
            f_X_2.backward(dY_1, retain_graph=True)
        with torch.no_grad():
            X_1 = Y_1 - f_X_2
            del f_X_2, Y_1
            dY_2 = dY_2 + X_2.grad
            X_2.grad = None
            X_2 = X_2.detach()
        return X_1, X_2, dY_1, dY_2


class RevBackProp(Function):
    @staticmethod
    def forward(ctx, x, layers, step):
        X_1, X_2 = torch.chunk(x, 2, dim=-1)
        for layer in layers:
            X_1, X_2 = layer(X_1, X_2, step)
        all_tensors = [X_1.detach(), X_2.detach()]
        ctx.save_for_backward(*all_tensors)
        ctx.layers = layers
        return torch.cat([X_1, X_2], dim=-1)

    @staticmethod
    def backward(ctx, dx):
        dX_1, dX_2 = torch.chunk(dx, 2, dim=-1)
        X_1, X_2 = ctx.saved_tensors
        layers = ctx.layers
        for layer in layers[::-1]:
            X_1, X_2, dX_1, dX_2 = layer.backward_pass(Y_1=X_1, Y_2=X_2, dY_1=dX_1, dY_2=dX_2)
        dx = torch.cat([dX_1, dX_2], dim=-1)
        del dX_1, dX_2, X_1, X_2
        return dx, None, None


class RevViT(nn.Module):
    def __init__(self, drop_path_rate=0.1):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, DIM, kernel_size=PATCH, stride=PATCH)
        n = (IMG // PATCH) ** 2
        self.pos_embeddings = nn.Parameter(torch.zeros(1, n, DIM))
        nn.init.trunc_normal_(self.pos_embeddings, std=0.02)
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, DEPTH)]
        self.layers = nn.ModuleList([ReversibleBlock(DIM, HEADS, dpr[i], i) for i in range(DEPTH)])
        self.norm = nn.LayerNorm(2 * DIM)
        self.head = nn.Linear(2 * DIM, CLASSES, bias=True)
        self.use_vanilla_backward = False

    @staticmethod
    def vanilla_backward(h, layers, step):
        X_1, X_2 = torch.chunk(h, 2, dim=-1)
        for layer in layers:
            X_1, X_2 = layer(X_1, X_2, step)
        return torch.cat([X_1, X_2], dim=-1)

    def forward(self, x, step=0):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = x + self.pos_embeddings
        x = torch.cat([x, x], dim=-1)
        if not self.training or self.use_vanilla_backward:
            executing_fn = RevViT.vanilla_backward
        else:
            executing_fn = RevBackProp.apply
        x = executing_fn(x, self.layers, step)
        x = x.mean(1)
        x = self.norm(x)
        return self.head(x)


model = RevViT().to(dev)
decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "pos_embeddings" not in n]
no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "pos_embeddings" in n]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3
)
gen = torch.Generator(device=dev)
gen.manual_seed(2841)
print("params", sum(p.numel() for p in model.parameters()))
report("setup")


def train_step(step, batch):
    x = torch.randn(batch, 3, IMG, IMG, device=dev, generator=gen)
    y = torch.randint(0, CLASSES, (batch,), device=dev, generator=gen)
    logits = model(x, step)
    loss = F.cross_entropy(logits, y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


model.train()
for step in range(3):
    print(f"rev step {step} loss {train_step(step, 64):.4f}")
report("train_reversible")

model.use_vanilla_backward = True
print(f"vanilla step loss {train_step(3, 64):.4f}")
report("train_vanilla")

model.eval()
with torch.inference_mode():
    x = torch.randn(256, 3, IMG, IMG, device=dev, generator=gen)
    logits = model(x)
    top5 = logits.topk(5, dim=-1).indices
    print("eval", tuple(logits.shape), tuple(top5.shape), f"{logits.float().std().item():.4f}")
report("eval")
print("done")
