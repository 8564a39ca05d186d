"""Karpathy's makemore part 4 ("becoming a backprop ninja"), the lecture's notebook as a script: a
character MLP (embedding C, Linear W1/b1, hand-written batch norm with bngain/bnbias, tanh, Linear W2/b2)
whose forward pass is broken into ~20 named intermediates, each kept with ``retain_grad()``; the loss is
backpropagated by autograd and then by hand, intermediate by intermediate, and the two compared with
``cmp`` (exact, allclose, max difference). Exercise 2 folds cross_entropy's backward into one formula
(softmax minus one-hot, divided by n) and exercise 3 batch norm's backward into one line; exercise 4
trains with the hand-written gradients only, under ``torch.no_grad()`` (``p.data += -lr * grad``). The
embedding's gradient uses ``index_add_`` instead of the lecture's Python loop. The names data set is a
seeded synthetic one built in Python, moved to the GPU once.

Phases: 0 data on the GPU and parameters built; 1 the broken-up forward with retained intermediates,
loss.backward() and the manual backward compared tensor by tensor; 2 exercises 2 and 3 (fused
cross-entropy backward against F.cross_entropy, one-line batch-norm backward); 3 exercise 4: training
with manual gradients under no_grad; 4 batch-norm calibration over the training set, split losses and
sampling of 4096 names for a fixed 14 characters."""

import random

import torch
import torch.nn.functional as F

torch.manual_seed(2023)
random.seed(42)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


# synthetic names.txt: onset-vowel-coda syllables
onsets, vowels, codas = (
    ["b", "d", "k", "l", "m", "n", "r", "s", "t", "v", "ch", "sh"],
    "aeiou",
    ["", "n", "r", "l", "x"],
)
words = [
    "".join(
        random.choice(onsets) + random.choice(vowels) + random.choice(codas)
        for _ in range(random.randint(1, 3))
    )
    for _ in range(32000)
]
chars = sorted(set("".join(words)))
stoi = {s: i + 1 for i, s in enumerate(chars)}
stoi["."] = 0
itos = {i: s for s, i in stoi.items()}
vocab_size = len(itos)
block_size = 3


def build_dataset(ws):
    X, Y = [], []
    for w in ws:
        context = [0] * block_size
        for ch in w + ".":
            ix = stoi[ch]
            X.append(context)
            Y.append(ix)
            context = [*context[1:], ix]
    return torch.tensor(X), torch.tensor(Y)


random.shuffle(words)
n1, n2 = int(0.8 * len(words)), int(0.9 * len(words))
Xtr, Ytr = build_dataset(words[:n1])
Xdev, Ydev = build_dataset(words[n1:n2])
Xte, Yte = build_dataset(words[n2:])
Xtr, Ytr, Xdev, Ydev, Xte, Yte = (t.to(device) for t in (Xtr, Ytr, Xdev, Ydev, Xte, Yte))

n_embd = 24
n_hidden = 1536
g = torch.Generator(device=device).manual_seed(2147483647)
C = torch.randn((vocab_size, n_embd), generator=g, device=device)
W1 = (
    torch.randn((n_embd * block_size, n_hidden), generator=g, device=device)
    * (5 / 3)
    / ((n_embd * block_size) ** 0.5)
)
b1 = torch.randn(n_hidden, generator=g, device=device) * 0.1  # useless because of BN, kept as in the lecture
W2 = torch.randn((n_hidden, vocab_size), generator=g, device=device) * 0.1
b2 = torch.randn(vocab_size, generator=g, device=device) * 0.1
bngain = torch.randn((1, n_hidden), generator=g, device=device) * 0.1 + 1.0
bnbias = torch.randn((1, n_hidden), generator=g, device=device) * 0.1
parameters = [C, W1, b1, W2, b2, bngain, bnbias]
print(sum(p.nelement() for p in parameters), "parameters")
for p in parameters:
    p.requires_grad = True

batch_size = 8192
n = batch_size
report("data and parameters")


def cmp(s, dt, t):
    ex = torch.all(dt == t.grad).item()
    app = torch.allclose(dt, t.grad, rtol=1e-4, atol=1e-6)
    maxdiff = (dt - t.grad).abs().max().item()
    print(f"{s:15s} | exact: {ex!s:5s} | approximate: {app!s:5s} | maxdiff: {maxdiff:.3e}")


ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g, device=device)
Xb, Yb = Xtr[ix], Ytr[ix]

# forward pass, "chunkated" into smaller steps that are possible to backward one at a time
emb = C[Xb]
embcat = emb.view(emb.shape[0], -1)
hprebn = embcat @ W1 + b1
bnmeani = 1 / n * hprebn.sum(0, keepdim=True)
bndiff = hprebn - bnmeani
bndiff2 = bndiff**2
bnvar = 1 / (n - 1) * (bndiff2).sum(0, keepdim=True)  # Bessel's correction
bnvar_inv = (bnvar + 1e-5) ** -0.5
bnraw = bndiff * bnvar_inv
hpreact = bngain * bnraw + bnbias
h = torch.tanh(hpreact)
logits = h @ W2 + b2
logit_maxes = logits.max(1, keepdim=True).values
norm_logits = logits - logit_maxes
counts = norm_logits.exp()
counts_sum = counts.sum(1, keepdims=True)
counts_sum_inv = counts_sum**-1
probs = counts * counts_sum_inv
logprobs = probs.log()
loss = -logprobs[range(n), Yb].mean()

for p in parameters:
    p.grad = None
for t in [
    logprobs,
    probs,
    counts,
    counts_sum,
    counts_sum_inv,
    norm_logits,
    logit_maxes,
    logits,
    h,
    hpreact,
    bnraw,
    bnvar_inv,
    bnvar,
    bndiff2,
    bndiff,
    hprebn,
    bnmeani,
    embcat,
    emb,
]:
    t.retain_grad()
loss.backward()
print("loss", loss.item())

# exercise 1: backprop through the whole thing manually
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(n), Yb] = -1.0 / n
dprobs = (1.0 / probs) * dlogprobs
dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
dcounts = counts_sum_inv * dprobs
dcounts_sum = (-(counts_sum**-2)) * dcounts_sum_inv
dcounts += torch.ones_like(counts) * dcounts_sum
dnorm_logits = counts * dcounts
dlogits = dnorm_logits.clone()
dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)
dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes
dh = dlogits @ W2.T
dW2 = h.T @ dlogits
db2 = dlogits.sum(0)
dhpreact = (1.0 - h**2) * dh
dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
dbnraw = bngain * dhpreact
dbnbias = dhpreact.sum(0, keepdim=True)
dbndiff = bnvar_inv * dbnraw
dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
dbnvar = (-0.5 * (bnvar + 1e-5) ** -1.5) * dbnvar_inv
dbndiff2 = (1.0 / (n - 1)) * torch.ones_like(bndiff2) * dbnvar
dbndiff += (2 * bndiff) * dbndiff2
dhprebn = dbndiff.clone()
dbnmeani = (-dbndiff).sum(0)
dhprebn += 1.0 / n * (torch.ones_like(hprebn) * dbnmeani)
dembcat = dhprebn @ W1.T
dW1 = embcat.T @ dhprebn
db1 = dhprebn.sum(0)
demb = dembcat.view(emb.shape)
dC = torch.zeros_like(C)
dC.index_add_(0, Xb.view(-1), demb.view(-1, n_embd))

for name, dt, t in [
    ("logprobs", dlogprobs, logprobs),
    ("probs", dprobs, probs),
    ("counts_sum_inv", dcounts_sum_inv, counts_sum_inv),
    ("counts_sum", dcounts_sum, counts_sum),
    ("counts", dcounts, counts),
    ("norm_logits", dnorm_logits, norm_logits),
    ("logit_maxes", dlogit_maxes, logit_maxes),
    ("logits", dlogits, logits),
    ("h", dh, h),
    ("W2", dW2, W2),
    ("b2", db2, b2),
    ("hpreact", dhpreact, hpreact),
    ("bngain", dbngain, bngain),
    ("bnbias", dbnbias, bnbias),
    ("bnraw", dbnraw, bnraw),
    ("bnvar_inv", dbnvar_inv, bnvar_inv),
    ("bnvar", dbnvar, bnvar),
    ("bndiff2", dbndiff2, bndiff2),
    ("bndiff", dbndiff, bndiff),
    ("bnmeani", dbnmeani, bnmeani),
    ("hprebn", dhprebn, hprebn),
    ("embcat", dembcat, embcat),
    ("W1", dW1, W1),
    ("b1", db1, b1),
    ("emb", demb, emb),
    ("C", dC, C),
]:
    cmp(name, dt, t)
report("retain_grad forward, backward and manual backward")

# exercise 2: backprop through cross_entropy in one go
loss_fast = F.cross_entropy(logits, Yb)
print(loss_fast.item(), "diff:", (loss_fast - loss).item())
dlogits = F.softmax(logits, 1)
dlogits[range(n), Yb] -= 1
dlogits /= n
cmp("logits", dlogits, logits)

# exercise 3: backprop through batchnorm in one go
hpreact_fast = (
    bngain
    * (hprebn - hprebn.mean(0, keepdim=True))
    / torch.sqrt(hprebn.var(0, keepdim=True, unbiased=True) + 1e-5)
    + bnbias
)
print("max diff:", (hpreact_fast - hpreact).abs().max().item())
dhprebn = (
    bngain
    * bnvar_inv
    / n
    * (n * dhpreact - dhpreact.sum(0) - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))
)
cmp("hprebn", dhprebn, hprebn)
del (
    dlogprobs,
    dprobs,
    dcounts_sum_inv,
    dcounts,
    dcounts_sum,
    dnorm_logits,
    dlogit_maxes,
    dbndiff2,
    dbndiff,
    dbnraw,
)
del emb, embcat, hprebn, bnmeani, bndiff, bndiff2, bnvar, bnvar_inv, bnraw, hpreact, h, logits, logit_maxes
del norm_logits, counts, counts_sum, counts_sum_inv, probs, logprobs, loss, loss_fast, hpreact_fast
for p in parameters:
    p.grad = None
report("fused cross-entropy and batchnorm backward")

# exercise 4: putting it all together, training with the manual backward pass only
max_steps = 120
lossi = []
with torch.no_grad():
    for i in range(max_steps):
        ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g, device=device)
        Xb, Yb = Xtr[ix], Ytr[ix]
        # forward pass
        emb = C[Xb]
        embcat = emb.view(emb.shape[0], -1)
        hprebn = embcat @ W1 + b1
        bnmean = hprebn.mean(0, keepdim=True)
        bnvar = hprebn.var(0, keepdim=True, unbiased=True)
        bnvar_inv = (bnvar + 1e-5) ** -0.5
        bnraw = (hprebn - bnmean) * bnvar_inv
        hpreact = bngain * bnraw + bnbias
        h = torch.tanh(hpreact)
        logits = h @ W2 + b2
        loss = F.cross_entropy(logits, Yb)
        # manual backward pass
        dlogits = F.softmax(logits, 1)
        dlogits[range(n), Yb] -= 1
        dlogits /= n
        dh = dlogits @ W2.T
        dW2 = h.T @ dlogits
        db2 = dlogits.sum(0)
        dhpreact = (1.0 - h**2) * dh
        dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
        dbnbias = dhpreact.sum(0, keepdim=True)
        dhprebn = (
            bngain
            * bnvar_inv
            / n
            * (n * dhpreact - dhpreact.sum(0) - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))
        )
        dembcat = dhprebn @ W1.T
        dW1 = embcat.T @ dhprebn
        db1 = dhprebn.sum(0)
        demb = dembcat.view(emb.shape)
        dC = torch.zeros_like(C)
        dC.index_add_(0, Xb.view(-1), demb.view(-1, n_embd))
        grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]
        lr = 0.1 if i < max_steps // 2 else 0.01
        for p, grad in zip(parameters, grads, strict=True):
            p.data += -lr * grad
        if i % 40 == 0:
            print(f"{i:7d}/{max_steps:7d}: {loss.item():.4f}")
        lossi.append(loss.log10().item())
report("training with manual backprop under no_grad")

# calibrate the batch norm at the end of training
with torch.no_grad():
    emb = C[Xtr]
    embcat = emb.view(emb.shape[0], -1)
    hpreact = embcat @ W1 + b1
    bnmean = hpreact.mean(0, keepdim=True)
    bnvar = hpreact.var(0, keepdim=True, unbiased=True)


@torch.no_grad()  # this decorator disables gradient tracking
def split_loss(split):
    x, y = {"train": (Xtr, Ytr), "val": (Xdev, Ydev), "test": (Xte, Yte)}[split]
    emb = C[x]
    embcat = emb.view(emb.shape[0], -1)
    hpreact = embcat @ W1 + b1
    hpreact = bngain * (hpreact - bnmean) * (bnvar + 1e-5) ** -0.5 + bnbias
    h = torch.tanh(hpreact)
    logits = h @ W2 + b2
    loss = F.cross_entropy(logits, y)
    print(split, loss.item())


split_loss("train")
split_loss("val")

# sample from the model: 4096 names in parallel for a fixed 14 characters
with torch.no_grad():
    num = 4096
    context = torch.zeros((num, block_size), dtype=torch.long, device=device)
    out = []
    for _ in range(14):
        emb = C[context]
        embcat = emb.view(emb.shape[0], -1)
        hpreact = embcat @ W1 + b1
        hpreact = bngain * (hpreact - bnmean) * (bnvar + 1e-5) ** -0.5 + bnbias
        h = torch.tanh(hpreact)
        logits = h @ W2 + b2
        probs = F.softmax(logits, dim=1)
        ix = torch.multinomial(probs, num_samples=1, generator=g)
        context = torch.cat([context[:, 1:], ix], dim=1)
        out.append(ix)
    samples = torch.cat(out, dim=1).cpu()
for row in samples[:5].tolist():
    print("".join(itos[i] for i in row).split(".")[0])
report("batchnorm calibration, split loss and sampling")
