"""Karpathy's makemore part 5 ("building a WaveNet"), written the way the lecture writes it: hand-written
Linear / BatchNorm1d / Tanh / Embedding / FlattenConsecutive / Sequential classes (BatchNorm1d reduces over
dims (0, 1) when the input is 3-D and keeps running statistics updated under no_grad), a hierarchical
character model that fuses pairs of neighbouring positions three times (block size 8), trained with the
lecture's manual SGD (p.grad = None, loss.backward(), p.data += -lr * p.grad). The names data set is a
synthetic seeded one built in Python (every name becomes block_size contexts), moved to the GPU once.

Phases: 0 data on the GPU and model built; 1 manual SGD steps in fp32; 2 the same steps under bf16
autocast; 3 split_loss on train and dev with the layers in eval mode (running statistics); 4 parallel
sampling of 4096 names for a fixed 12 characters (multinomial, context shifted by cat)."""

import random

import torch
import torch.nn.functional as F

torch.manual_seed(3061)
random.seed(3061)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


# a synthetic "names.txt": syllable names of 2-4 syllables
cons, vows = "bcdfghjklmnprstvwz", "aeiouy"
words = []
for _ in range(40000):
    n = random.randint(2, 4)
    words.append("".join(random.choice(cons) + random.choice(vows) for _ in range(n)))
chars = sorted(set("".join(words)))
stoi = {s: i + 1 for i, s in enumerate(chars)}
stoi["."] = 0
vocab_size = len(stoi)
block_size = 8


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


n1 = int(0.9 * len(words))
Xtr, Ytr = build_dataset(words[:n1])
Xdev, Ydev = build_dataset(words[n1:])
Xtr, Ytr, Xdev, Ydev = Xtr.to(device), Ytr.to(device), Xdev.to(device), Ydev.to(device)


class Linear:
    def __init__(self, fan_in, fan_out, bias=True):
        self.weight = torch.randn((fan_in, fan_out), device=device) / fan_in**0.5
        self.bias = torch.zeros(fan_out, device=device) if bias else None

    def __call__(self, x):
        self.out = x @ self.weight
        if self.bias is not None:
            self.out = self.out + self.bias
        return self.out

    def parameters(self):
        return [self.weight] + ([] if self.bias is None else [self.bias])


class BatchNorm1d:
    def __init__(self, dim, eps=1e-5, momentum=0.1):
        self.eps, self.momentum, self.training = eps, momentum, True
        self.gamma = torch.ones(dim, device=device)
        self.beta = torch.zeros(dim, device=device)
        self.running_mean = torch.zeros(dim, device=device)
        self.running_var = torch.ones(dim, device=device)

    def __call__(self, x):
        if self.training:
            dim = 0 if x.ndim == 2 else (0, 1)
            xmean = x.mean(dim, keepdim=True)
            xvar = x.var(dim, keepdim=True)
        else:
            xmean, xvar = self.running_mean, self.running_var
        xhat = (x - xmean) / torch.sqrt(xvar + self.eps)
        self.out = self.gamma * xhat + self.beta
        if self.training:
            with torch.no_grad():
                self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * xmean.squeeze()
                self.running_var = (1 - self.momentum) * self.running_var + self.momentum * xvar.squeeze()
        return self.out

    def parameters(self):
        return [self.gamma, self.beta]


class Tanh:
    def __call__(self, x):
        self.out = torch.tanh(x)
        return self.out

    def parameters(self):
        return []


class Embedding:
    def __init__(self, num_embeddings, embedding_dim):
        self.weight = torch.randn((num_embeddings, embedding_dim), device=device)

    def __call__(self, ix):
        self.out = self.weight[ix]
        return self.out

    def parameters(self):
        return [self.weight]


class FlattenConsecutive:
    def __init__(self, n):
        self.n = n

    def __call__(self, x):
        B, T, C = x.shape
        x = x.view(B, T // self.n, C * self.n)
        if x.shape[1] == 1:
            x = x.squeeze(1)
        self.out = x
        return self.out

    def parameters(self):
        return []


class Sequential:
    def __init__(self, layers):
        self.layers = layers

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        self.out = x
        return self.out

    def parameters(self):
        return [p for layer in self.layers for p in layer.parameters()]


n_embd, n_hidden = 64, 1024
model = Sequential(
    [
        Embedding(vocab_size, n_embd),
        FlattenConsecutive(2), Linear(n_embd * 2, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
        FlattenConsecutive(2), Linear(n_hidden * 2, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
        FlattenConsecutive(2), Linear(n_hidden * 2, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
        Linear(n_hidden, vocab_size),
    ]
)  # fmt: skip
with torch.no_grad():
    model.layers[-1].weight *= 0.1
parameters = model.parameters()
for p in parameters:
    p.requires_grad = True
print("parameters", sum(p.nelement() for p in parameters), "examples", Xtr.shape[0])
report("built")

batch_size = 4096
lossi = []


def sgd_step(i, autocast):
    ix = torch.randint(0, Xtr.shape[0], (batch_size,), device=device)
    Xb, Yb = Xtr[ix], Ytr[ix]
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=autocast):
        logits = model(Xb)
        loss = F.cross_entropy(logits.float(), Yb)
    for p in parameters:
        p.grad = None
    loss.backward()
    lr = 0.1 if i < 30 else 0.01
    for p in parameters:
        p.data += -lr * p.grad
    lossi.append(loss.log10().item())


for i in range(40):
    sgd_step(i, autocast=False)
report("sgd fp32")

for i in range(40, 80):
    sgd_step(i, autocast=True)
report("sgd bf16 autocast")

for layer in model.layers:
    layer.training = False


@torch.no_grad()
def split_loss(split):
    x, y = {"train": (Xtr, Ytr), "val": (Xdev, Ydev)}[split]
    x, y = x[:32768], y[:32768]
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    print(split, round(loss.item(), 3))


split_loss("train")
split_loss("val")
report("split loss eval")

itos = {i: s for s, i in stoi.items()}
with torch.no_grad():
    n_samples = 4096
    context = torch.zeros((n_samples, block_size), dtype=torch.long, device=device)
    out = []
    for _ in range(12):
        logits = model(context)
        probs = F.softmax(logits, dim=1)
        ix = torch.multinomial(probs, num_samples=1)
        context = torch.cat([context[:, 1:], ix], dim=1)
        out.append(ix)
    samples = torch.cat(out, dim=1).cpu()
print("".join(itos[i] for i in samples[0].tolist()))
report("sampling")
