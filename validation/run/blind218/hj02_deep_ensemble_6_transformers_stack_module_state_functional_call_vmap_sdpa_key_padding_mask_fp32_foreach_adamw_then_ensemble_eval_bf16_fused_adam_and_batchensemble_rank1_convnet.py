"""Deep ensembles (Lakshminarayanan et al. 2017) trained at once with torch.func, then BatchEnsemble.

Six copies of a small hand-written transformer text classifier (vocabulary 8192, 4 pre-norm layers of 384,
6 heads, sequences of 256 with right padding masked by a boolean key-padding mask passed to SDPA, mean
pooling over the valid tokens, 20 classes) are stacked with torch.func.stack_module_state and run by
torch.vmap over torch.func.functional_call; each member sees its own bootstrap batch; the stacked leaves get
ordinary .grad from one backward of the summed member losses.

Phases: 3 steps in fp32 with foreach AdamW on the stacked parameters (batch 32 a member); ensemble
evaluation under no_grad, the same batch of 128 sent to every member (in_dims None), predictive NLL, entropy
and mutual information; 3 steps under bf16 autocast with a fused Adam; then empty_cache() and BatchEnsemble
(Wen et al. 2020): one conv net whose every layer has shared weights and per-member rank-1 fast weights
(input scale r_i, output scale s_i), the batch tiled over 4 members, SGD momentum at 128 x 4, 96 x 96 images.
4 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2182)
device = "cuda" if torch.cuda.is_available() else "cpu"
M = 6
VOCAB, D, LAYERS, HEADS, SEQ, CLASSES = 8192, (48 if SMALL else 384), (1 if SMALL else 4), 6, (32 if SMALL else 256), 20
B_TRAIN, B_EVAL = (2, 4) if SMALL else (32, 128)
BE_M, BE_B, BE_IMG = 4, (4 if SMALL else 128), (32 if SMALL else 96)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, x, key_mask):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask[:, None, None, :])
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TextClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.randn(SEQ, D) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, ids, lengths):
        key_mask = torch.arange(SEQ, device=ids.device)[None, :] < lengths[:, None]
        x = self.tok(ids) + self.pos
        for blk in self.blocks:
            x = blk(x, key_mask)
        m = key_mask[..., None].to(x.dtype)
        pooled = (self.ln(x) * m).sum(1) / m.sum(1)
        return self.head(pooled)


members = [TextClassifier().to(device) for _ in range(M)]
params, buffers = stack_module_state(members)
base = copy.deepcopy(members[0]).to("meta")
del members


def member_forward(p, b, ids, lengths):
    return functional_call(base, (p, b), (ids, lengths))


ens = torch.vmap(member_forward, in_dims=(0, 0, 0, 0))
ens_shared = torch.vmap(member_forward, in_dims=(0, 0, None, None))


def batch(n, members=None):
    shape = (members, n) if members else (n,)
    ids = torch.randint(0, VOCAB, (*shape, SEQ), device=device)
    lengths = torch.randint(SEQ // 4, SEQ + 1, shape, device=device)
    y = torch.randint(0, CLASSES, shape, device=device)
    return ids, lengths, y


opt = torch.optim.AdamW(params.values(), lr=3e-4, weight_decay=0.01, foreach=True)
for step in range(3):
    ids, lengths, y = batch(B_TRAIN, M)  # a bootstrap batch per member
    logits = ens(params, buffers, ids, lengths)  # [M, B, C]
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(M, -1).mean(1).sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"ensemble train loss {loss.item() / M:.4f}")
report("vmap ensemble fp32 foreach adamw")

with torch.no_grad():
    ids, lengths, y = batch(B_EVAL)
    probs = ens_shared(params, buffers, ids, lengths).softmax(-1)  # [M, B, C]
    mean_p = probs.mean(0)
    nll = F.nll_loss(mean_p.clamp_min(1e-12).log(), y)
    ent = -(mean_p * mean_p.clamp_min(1e-12).log()).sum(-1)
    mi = ent + (probs * probs.clamp_min(1e-12).log()).sum(-1).mean(0)
    print(f"ensemble nll {nll.item():.4f} entropy {ent.mean().item():.4f} mi {mi.mean().item():.5f}")
    del probs, mean_p
report("ensemble eval no_grad shared batch")

del opt
opt = torch.optim.Adam(params.values(), lr=1e-4, fused=device == "cuda")
for step in range(3):
    ids, lengths, y = batch(B_TRAIN, M)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = ens(params, buffers, ids, lengths)
    loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten()) * M
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"bf16 ensemble loss {loss.item() / M:.4f}")
report("vmap ensemble bf16 autocast fused adam")

# BatchEnsemble: shared weights, per-member rank-1 fast weights, batch tiled over the members
del opt, params, buffers, logits, loss, ens, ens_shared, base
if device == "cuda":
    torch.cuda.empty_cache()


class BEConv(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.r = nn.Parameter(1 + 0.1 * torch.randn(BE_M, cin))
        self.s = nn.Parameter(1 + 0.1 * torch.randn(BE_M, cout))
        self.bias = nn.Parameter(torch.zeros(BE_M, cout))
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        n = x.shape[0] // BE_M
        r = self.r.repeat_interleave(n, 0)[:, :, None, None]
        s = self.s.repeat_interleave(n, 0)[:, :, None, None]
        b = self.bias.repeat_interleave(n, 0)[:, :, None, None]
        return F.relu(self.bn(self.conv(x * r) * s + b))


class BENet(nn.Module):
    def __init__(self):
        super().__init__()
        chans = [(3, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1), (256, 512, 2)]
        self.layers = nn.Sequential(*(BEConv(a, b, s) for a, b, s in chans))
        self.head = nn.Linear(512, CLASSES)

    def forward(self, x):
        return self.head(self.layers(x).mean((2, 3)))


net = BENet().to(device)
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
for step in range(3):
    x = torch.randn(BE_B, 3, BE_IMG, BE_IMG, device=device)
    y = torch.randint(0, CLASSES, (BE_B,), device=device)
    logits = net(x.repeat(BE_M, 1, 1, 1))
    loss = F.cross_entropy(logits, y.repeat(BE_M))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"batchensemble loss {loss.item():.4f}")
report("batchensemble rank1 sgd momentum")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
