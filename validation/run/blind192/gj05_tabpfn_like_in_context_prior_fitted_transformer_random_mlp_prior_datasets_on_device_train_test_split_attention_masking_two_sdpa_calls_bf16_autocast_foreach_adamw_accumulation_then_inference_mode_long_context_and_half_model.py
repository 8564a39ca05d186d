"""A TabPFN-like prior-fitted network (Hollmann et al. 2023) written by hand: a transformer that reads a
whole small dataset (train rows with their labels, then test rows) as one sequence and predicts the test
labels in context.

Prior: each step samples 16 synthetic datasets on the device: 1,024 train + 256 test rows of 100
standard-normal features, labels from a random 2-layer MLP per dataset (torch.bmm, tanh, argmax over 10
classes). Model: each row embedded by Linear(100 -> 512), the train rows' labels by nn.Embedding(10, 512)
added to their row embeddings; 8 post-norm encoder layers of 8 heads (d 512, feed-forward 1,024, GELU,
dropout 0) whose attention lets the train rows attend to the train rows and the test rows attend to the
train rows only, written as two F.scaled_dot_product_attention calls sharing one QKV projection; a decoder
Linear(512 -> 1,024) GELU Linear(-> 10) on the test rows, cross-entropy. bf16 autocast, AdamW foreach
(lr 1e-4, weight decay 0), 2 micro-batches of gradient accumulation per step, grad clipping at 1.0.

Phases: the first step; 2 more steps; in-context prediction for 4 datasets of 8,192 train + 1,024 test
rows under torch.inference_mode and bf16 autocast, the class probabilities moved to the host; then the
model cast with .half() and the same prediction in fp16 at 2 datasets of 16,384 train rows. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19205)
if SMALL:
    NDS, N_TRAIN, N_TEST, STEPS, D, LAYERS = 2, 32, 8, 1, 64, 2
    ICL = [(2, 64, 16), (1, 128, 16)]
else:
    NDS, N_TRAIN, N_TEST, STEPS, D, LAYERS = 16, 1024, 256, 2, 512, 8
    ICL = [(4, 8192, 1024), (2, 16384, 1024)]
N_FEAT = 100
N_CLASSES = 10
ACCUM = 2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def sample_datasets(nds, n_train, n_test):
    n = n_train + n_test
    x = torch.randn(nds, n, N_FEAT, device=device)
    w1 = torch.randn(nds, N_FEAT, 64, device=device) / N_FEAT**0.5
    w2 = torch.randn(nds, 64, N_CLASSES, device=device) / 8
    y = torch.bmm(torch.tanh(torch.bmm(x, w1)), w2).argmax(-1)
    return x, y


class ICLLayer(nn.Module):
    def __init__(self, d, heads=8, d_ff=1024):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.norm1 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, d_ff)
        self.ff2 = nn.Linear(d_ff, d)
        self.norm2 = nn.LayerNorm(d)

    def forward(self, x, n_train):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        k_tr, v_tr = k[:, :, :n_train], v[:, :, :n_train]
        a_train = F.scaled_dot_product_attention(q[:, :, :n_train], k_tr, v_tr)
        a_test = F.scaled_dot_product_attention(q[:, :, n_train:], k_tr, v_tr)
        a = torch.cat([a_train, a_test], 2).transpose(1, 2).reshape(b, n, d)
        x = self.norm1(x + self.out(a))
        return self.norm2(x + self.ff2(F.gelu(self.ff1(x))))


class PFN(nn.Module):
    def __init__(self, d=D, layers=LAYERS):
        super().__init__()
        self.x_enc = nn.Linear(N_FEAT, d)
        self.y_enc = nn.Embedding(N_CLASSES, d)
        self.layers = nn.ModuleList(ICLLayer(d) for _ in range(layers))
        self.dec = nn.Sequential(nn.Linear(d, 1024), nn.GELU(), nn.Linear(1024, N_CLASSES))

    def forward(self, x, y_train):
        n_train = y_train.shape[1]
        h = self.x_enc(x)
        h = torch.cat([h[:, :n_train] + self.y_enc(y_train), h[:, n_train:]], 1)
        for layer in self.layers:
            h = layer(h, n_train)
        return self.dec(h[:, n_train:])


model = PFN().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, foreach=True)
print(f"PFN params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")


def train_step():
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for _ in range(ACCUM):
        x, y = sample_datasets(NDS, N_TRAIN, N_TEST)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logits = model(x, y[:, :N_TRAIN])
        loss = F.cross_entropy(logits.float().reshape(-1, N_CLASSES), y[:, N_TRAIN:].reshape(-1)) / ACCUM
        loss.backward()
        total += loss.item()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return total, gn.item()


model.train()
loss, gn = train_step()
print(f"step 0 loss {loss:.4f} grad norm {gn:.3f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    loss, gn = train_step()
    print(f"step {step} loss {loss:.4f} grad norm {gn:.3f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
nds, n_train, n_test = ICL[0]
x, y = sample_datasets(nds, n_train, n_test)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    probs = model(x, y[:, :n_train]).float().softmax(-1).cpu()
acc = (probs.argmax(-1) == y[:, n_train:].cpu()).float().mean()
print(f"in-context accuracy {acc:.4f} on {nds} datasets of {n_train} train rows")
if device == "cuda":
    print(f"icl peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.half()
nds, n_train, n_test = ICL[1]
x, y = sample_datasets(nds, n_train, n_test)
if device == "cuda":
    with torch.inference_mode():
        probs = model(x.half(), y[:, :n_train]).float().softmax(-1).cpu()
    print(f"fp16 in-context mean max prob {probs.max(-1).values.mean():.4f}")
    print(
        f"fp16 allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
