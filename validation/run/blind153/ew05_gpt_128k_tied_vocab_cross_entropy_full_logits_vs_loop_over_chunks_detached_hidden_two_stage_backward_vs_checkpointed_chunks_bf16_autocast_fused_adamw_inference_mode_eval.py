"""Three ways to compute the language-model loss over a 128,256-token vocabulary in a hand-written
pre-norm GPT (8 layers, 1,024 wide, 16 heads, GELU MLP of 4,096, learned positions, head tied to
the embedding; fp32 parameters under bf16 autocast, fused AdamW, batch 8 x 1,024, gradient
accumulation over 2 micro-batches): (1) the plain way, the whole logits then F.cross_entropy on
their fp32 copy; (2) a loop over chunks of 2,048 rows with a two-stage backward, as people write it
to avoid the full logits: the final hidden states are detached into a leaf that requires grad,
each chunk's logits and loss are made and backpropagated at once (the tied weight's gradient
accumulates, the leaf's .grad gathers the hidden-state gradient), and finally the trunk is
backpropagated with hidden.backward(leaf.grad); (3) every chunk's loss under
torch.utils.checkpoint(use_reentrant=False) and one backward of their sum. One step each, then the
chunked loop once more, then a validation loss over chunks under inference_mode; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15305)
if SMALL:
    V, D, L, H, B, T, ACC, CHUNK = 1000, 64, 2, 4, 2, 64, 2, 32
else:
    V, D, L, H, B, T, ACC, CHUNK = 128256, 1024, 8, 16, 8, 1024, 2, 2048
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.out(a.transpose(1, 2).reshape(b, t, D))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        nn.init.normal_(self.tok.weight, std=0.02)

    def trunk(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x)

    def logits(self, h):
        return F.linear(h, self.tok.weight)


def chunk_loss(h, weight, y):
    return F.cross_entropy(F.linear(h, weight).float(), y, reduction="sum")


model = GPT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device == "cuda")
autocast = torch.autocast(device_type=device, dtype=torch.bfloat16)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch():
    ids = torch.randint(0, V, (B, T + 1), device=device)
    return ids[:, :-1], ids[:, 1:].reshape(-1)


def micro_full(idx, y):
    with autocast:
        logits = model.logits(model.trunk(idx))
    loss = F.cross_entropy(logits.float().view(-1, V), y)
    (loss / ACC).backward()
    return loss.detach()


def micro_loop(idx, y):
    with autocast:
        hidden = model.trunk(idx).view(-1, D)
    leaf = hidden.detach().requires_grad_(True)
    total = 0.0
    for s in range(0, leaf.shape[0], CHUNK):
        with autocast:
            loss_c = chunk_loss(leaf[s : s + CHUNK], model.tok.weight, y[s : s + CHUNK]) / y.numel()
        (loss_c / ACC).backward()
        total += loss_c.detach()
    hidden.backward(leaf.grad)
    return total


def micro_checkpointed(idx, y):
    with autocast:
        hidden = model.trunk(idx).view(-1, D)
        total = sum(
            checkpoint(
                chunk_loss, hidden[s : s + CHUNK], model.tok.weight, y[s : s + CHUNK], use_reentrant=False
            )
            for s in range(0, hidden.shape[0], CHUNK)
        )
    loss = total / y.numel()
    (loss / ACC).backward()
    return loss.detach()


def step(tag, micro):
    for _ in range(ACC):
        idx, y = batch()
        loss = micro(idx, y)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"{tag} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model.train()
step("full logits", micro_full)
step("chunk loop", micro_loop)
step("checkpointed chunks", micro_checkpointed)
step("chunk loop again", micro_loop)

model.eval()
with torch.inference_mode(), autocast:
    idx, y = batch()
    hidden = model.trunk(idx).view(-1, D)
    val = sum(
        chunk_loss(hidden[s : s + CHUNK], model.tok.weight, y[s : s + CHUNK])
        for s in range(0, y.numel(), CHUNK)
    )
    val = val / y.numel()
if device == "cuda":
    print(
        f"val loss {val.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
