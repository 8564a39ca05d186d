"""Data-pruning and data-attribution scores for a text classifier, the way "Deep Learning on a Data
Diet" (GraNd and EL2N) and TracIn (Pruthi et al.) compute them with torch.func: a 4-layer
pre-norm Transformer encoder (nn.TransformerEncoderLayer, batch_first, d_model 256, 8 heads, GELU,
an 8,000-token embedding, learned positions, a masked mean pool and a 4-class head) trained under
bf16 autocast with AdamW for 3 steps of batch 128 x 128 tokens with padding masks, the parameters
saved as TracIn checkpoints (detached clones); then in fp32 and eval mode the per-sample
gradients of the cross-entropy by vmap(grad(loss)) over torch.func.functional_call, in chunks of
32 of 512 training examples: the GraNd score (each example's gradient norm), EL2N (the error
vector's norm) and the TracIn self-influence; the test gradients of 32 examples, and the TracIn
influence of every training example on every test example as the sum over checkpoints of the
learning rate times the flattened gradients' dot products (torch.cat of each chunk's flattened
gradients, a matmul against the test gradients); the top-k most helpful and harmful examples;
5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14403)
VOCAB, D, HEADS, LAYERS, SEQ = (500, 32, 4, 2, 16) if SMALL else (8000, 256, 8, 4, 128)
B, STEPS, N_TRAIN, N_TEST, CHUNK, CLASSES = (8, 2, 16, 4, 8, 4) if SMALL else (128, 3, 512, 32, 32, 4)
LR = 3e-4
device = "cuda" if torch.cuda.is_available() else "cpu"


class TextClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(SEQ, D) * 0.02)
        layer = nn.TransformerEncoderLayer(
            D, HEADS, 4 * D, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, ids, pad):
        x = self.tok(ids) + self.pos[: ids.shape[-1]]
        x = self.encoder(x, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        x = (self.norm(x) * keep).sum(-2) / keep.sum(-2).clamp_min(1.0)
        return self.head(x)


def make_batch(n):
    ids = torch.randint(1, VOCAB, (n, SEQ), device=device)
    lengths = torch.randint(SEQ // 4, SEQ + 1, (n,), device=device)
    pad = torch.arange(SEQ, device=device).unsqueeze(0) >= lengths.unsqueeze(1)
    ids = ids.masked_fill(pad, 0)
    labels = torch.randint(0, CLASSES, (n,), device=device)
    return ids, pad, labels


model = TextClassifier().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

checkpoints = []
for step in range(STEPS):
    ids, pad, labels = make_batch(B)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(ids, pad), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    checkpoints.append({k: v.detach().clone() for k, v in model.named_parameters()})
if device == "cuda":
    print(
        f"train loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del loss
opt.zero_grad(set_to_none=True)

model.eval()
buffers = dict(model.named_buffers())


def sample_loss(params, ids, pad, label):
    logits = functional_call(model, (params, buffers), (ids.unsqueeze(0), pad.unsqueeze(0)))
    return F.cross_entropy(logits, label.unsqueeze(0))


per_sample_grads = vmap(grad(sample_loss), in_dims=(None, 0, 0, 0))


def flat_grads(params, ids, pad, labels):
    g = per_sample_grads(params, ids, pad, labels)
    return torch.cat([v.flatten(1) for v in g.values()], dim=1)


train_ids, train_pad, train_labels = make_batch(N_TRAIN)
test_ids, test_pad, test_labels = make_batch(N_TEST)
params = checkpoints[-1]
grand, el2n = [], []
with torch.no_grad():
    for s in range(0, N_TRAIN, CHUNK):
        sl = slice(s, s + CHUNK)
        g = per_sample_grads(params, train_ids[sl], train_pad[sl], train_labels[sl])
        grand.append(torch.stack([v.flatten(1).pow(2).sum(1) for v in g.values()]).sum(0).sqrt())
        probs = functional_call(model, (params, buffers), (train_ids[sl], train_pad[sl])).softmax(-1)
        el2n.append((probs - F.one_hot(train_labels[sl], CLASSES)).norm(dim=-1))
        del g
grand, el2n = torch.cat(grand), torch.cat(el2n)
if device == "cuda":
    print(
        f"GraNd {grand.mean().item():.4f} EL2N {el2n.mean().item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

influence = torch.zeros(N_TRAIN, N_TEST, device=device)
self_influence = torch.zeros(N_TRAIN, device=device)
with torch.no_grad():
    for ckpt in checkpoints:
        test_g = flat_grads(ckpt, test_ids, test_pad, test_labels)
        for s in range(0, N_TRAIN, CHUNK):
            sl = slice(s, s + CHUNK)
            train_g = flat_grads(ckpt, train_ids[sl], train_pad[sl], train_labels[sl])
            influence[sl] += LR * train_g @ test_g.T
            self_influence[sl] += LR * train_g.pow(2).sum(1)
            del train_g
        del test_g
if device == "cuda":
    print(
        f"TracIn {influence.abs().mean().item():.3e} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

helpful = influence.topk(10, dim=0).indices
harmful = (-influence).topk(10, dim=0).indices
keep = torch.argsort(grand, descending=True)[: N_TRAIN // 2]
pruned_ids, pruned_pad, pruned_labels = train_ids[keep], train_pad[keep], train_labels[keep]
opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
model.train()
ids, pad, labels = pruned_ids[:B], pruned_pad[:B], pruned_labels[:B]
with torch.autocast(device_type=device, dtype=torch.bfloat16):
    loss = F.cross_entropy(model(ids, pad), labels)
loss.backward()
opt.step()
if device == "cuda":
    print(
        f"pruned step loss {loss.item():.4f} helpful {helpful.shape} self {self_influence.max().item():.3e}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
