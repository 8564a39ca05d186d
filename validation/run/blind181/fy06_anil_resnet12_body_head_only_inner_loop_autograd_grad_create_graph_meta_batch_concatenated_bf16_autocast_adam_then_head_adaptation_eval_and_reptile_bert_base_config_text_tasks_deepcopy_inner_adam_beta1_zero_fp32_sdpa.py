"""ANIL (Raghu et al. 2020, "Rapid Learning or Feature Reuse?") and Reptile (Nichol et al. 2018),
two meta-learners in one script. ANIL: a ResNet-12 body (widths 64, 128, 256, 512, three 3 x 3
conv + BN + LeakyReLU(0.1) per block, 1 x 1 shortcut, MaxPool2d(2), global average pooling) and a
5-way linear head whose weight and bias are the only parameters adapted in the inner loop; a
meta-batch of 4 miniImageNet-style 5-way 5-shot 15-query tasks at 84 x 84 goes through the body in
one concatenated forward of 400 images under bf16 autocast, then per task 10 inner SGD steps (lr
0.1) on the fp32 head by torch.autograd.grad(create_graph=True) over the support features, the
query loss of the adapted head backpropagated into the body and the head; Adam (lr 1e-3); the
first meta step its own phase then 2 more. Then ANIL's meta-test: the body under torch.no_grad, a
fresh head per task adapted for 20 steps with gradients, 4 tasks. Then Reptile for few-shot text
classification on a BertForSequenceClassification built from a bert-base BertConfig (random init,
SDPA attention, 5 labels): per task a copy.deepcopy of the model trained for 4 inner steps with
Adam (betas (0, 0.999), lr 5e-5, as Nichol et al.) on batches of 20 x 128 tokens in fp32, then
the meta-update theta += 0.5 * (theta_task - theta) under torch.no_grad, the copy deleted; the
first outer step its own phase then 2 more; 5 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import BertConfig, BertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18106)
if SMALL:
    RES, QUERY, META_B, WIDTHS, SEQ, TXT_B = 20, 2, 2, (8, 16, 16, 32), 16, 5
    bert_cfg = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
else:
    RES, QUERY, META_B, WIDTHS, SEQ, TXT_B = 84, 15, 4, (64, 128, 256, 512), 128, 20
    bert_cfg = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
WAYS, SHOTS = 5, 5
INNER_STEPS, INNER_LR = 10, 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(c, cout, 3, 1, 1, bias=False) for c in (cin, cout, cout)])
        self.bns = nn.ModuleList([nn.BatchNorm2d(cout) for _ in range(3)])
        self.act = nn.LeakyReLU(0.1)
        self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        out = x
        for i, (conv, bn) in enumerate(zip(self.convs, self.bns, strict=True)):
            out = bn(conv(out))
            if i < 2:
                out = self.act(out)
        return self.pool(self.act(out + self.shortcut(x)))


class Body(nn.Module):
    def __init__(self, widths):
        super().__init__()
        chans = (3, *widths)
        self.blocks = nn.Sequential(*[Block(chans[i], chans[i + 1]) for i in range(4)])

    def forward(self, x):
        return self.blocks(x).mean(dim=(2, 3))


def tasks(n):
    x = torch.randn(n * WAYS * (SHOTS + QUERY), 3, RES, RES, device=device)
    ys = torch.arange(WAYS, device=device).repeat_interleave(SHOTS)
    yq = torch.arange(WAYS, device=device).repeat_interleave(QUERY)
    return x, ys, yq


def adapt_head(w, b, feats, y, steps, create_graph):
    for _ in range(steps):
        loss = F.cross_entropy(F.linear(feats, w, b), y)
        gw, gb = torch.autograd.grad(loss, (w, b), create_graph=create_graph)
        w, b = w - INNER_LR * gw, b - INNER_LR * gb
    return w, b


body = Body(WIDTHS).to(device)
head = nn.Linear(WIDTHS[-1], WAYS).to(device)
meta_opt = torch.optim.Adam(list(body.parameters()) + list(head.parameters()), lr=1e-3)
if device == "cuda":
    print(f"anil model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

per_task = WAYS * (SHOTS + QUERY)
body.train()
for step in range(3):
    x, ys, yq = tasks(META_B)
    meta_opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        feats = body(x)
    feats = feats.float().view(META_B, per_task, -1)
    meta_loss, correct = 0.0, 0
    for t in range(META_B):
        support, query = feats[t, : WAYS * SHOTS], feats[t, WAYS * SHOTS :]
        w, b = adapt_head(head.weight, head.bias, support, ys, INNER_STEPS, create_graph=True)
        logits = F.linear(query, w, b)
        meta_loss = meta_loss + F.cross_entropy(logits, yq) / META_B
        correct += (logits.argmax(1) == yq).sum().item()
    meta_loss.backward()
    meta_opt.step()
    print(f"anil step {step} meta loss {meta_loss.item():.4f} acc {correct / (META_B * WAYS * QUERY):.3f}")
    if step == 0 and device == "cuda":
        print(f"first meta step peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
del x, feats, support, query, w, b, logits, meta_loss
if device == "cuda":
    print(f"anil peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

body.eval()
accs = []
for _ in range(4):
    x, ys, yq = tasks(1)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        feats = body(x).float()
    w = head.weight.detach().clone().requires_grad_(True)
    b = head.bias.detach().clone().requires_grad_(True)
    w, b = adapt_head(w, b, feats[: WAYS * SHOTS], ys, 20, create_graph=False)
    with torch.no_grad():
        accs.append((F.linear(feats[WAYS * SHOTS :], w, b).argmax(1) == yq).float().mean().item())
print(f"anil meta-test acc {sum(accs) / len(accs):.3f}")
del x, feats, w, b
if device == "cuda":
    print(f"anil test peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# ---- Reptile on text classification
del body, head, meta_opt
config = BertConfig(num_labels=WAYS, attn_implementation="sdpa", **bert_cfg)
bert = BertForSequenceClassification(config).to(device)
META_EPS = 0.5
if device == "cuda":
    print(f"bert {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def text_task():
    ids = torch.randint(1000, config.vocab_size, (TXT_B, SEQ), device=device)
    mask = torch.ones_like(ids)
    mask[TXT_B // 2 :, SEQ * 3 // 4 :] = 0
    labels = torch.arange(WAYS, device=device).repeat(TXT_B // WAYS)
    return ids, mask, labels


for outer in range(3):
    fast = copy.deepcopy(bert)
    fast.train()
    inner_opt = torch.optim.Adam(fast.parameters(), lr=5e-5, betas=(0.0, 0.999))
    for _ in range(4):
        ids, mask, labels = text_task()
        out = fast(input_ids=ids, attention_mask=mask, labels=labels)
        inner_opt.zero_grad()
        out.loss.backward()
        inner_opt.step()
    with torch.no_grad():
        for p, q in zip(bert.parameters(), fast.parameters(), strict=True):
            p.add_(q - p, alpha=META_EPS)
    print(f"reptile outer {outer} inner loss {out.loss.item():.4f}")
    del fast, inner_opt, out
    if outer == 0 and device == "cuda":
        print(f"first outer step peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
if device == "cuda":
    print(f"reptile peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
