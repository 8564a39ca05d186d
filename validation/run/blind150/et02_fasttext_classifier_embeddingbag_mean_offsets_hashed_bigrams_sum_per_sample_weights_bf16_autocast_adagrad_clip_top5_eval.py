"""A fastText-style text classifier written by hand: documents of 20..400 words (lengths drawn on
the GPU, word ids drawn for their total), the word ids through nn.EmbeddingBag(mode="mean") with
fastText's flat input and offsets, their bigrams hashed into 2,000,000 buckets (a multiplicative
hash on the GPU at every flat position) through a second nn.EmbeddingBag(mode="sum") over the
same offsets with per_sample_weights of 1 / (bigrams in the document), 0 at a document's last
word so no bigram crosses into the next), the two bags summed into a 128-dimensional linear
layer over 3,000 labels; dense gradients, torch.optim.Adagrad (lr 0.5, one sum a parameter),
clip_grad_norm_ at 1.0, bf16 autocast, batches of 4,096 documents, 4 steps; then the top-5
labels of 16,384 documents under inference_mode; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15002)
V, BUCKETS, DIM, NCLS, B, EB, STEPS = (
    (2000, 5000, 16, 20, 32, 64, 2) if SMALL else (400_000, 2_000_000, 128, 3000, 4096, 16384, 4)
)
MINLEN, MAXLEN = (5, 40) if SMALL else (20, 400)
device = "cuda" if torch.cuda.is_available() else "cpu"


class FastText(nn.Module):
    def __init__(self):
        super().__init__()
        self.words = nn.EmbeddingBag(V, DIM, mode="mean")
        self.ngrams = nn.EmbeddingBag(BUCKETS, DIM, mode="sum")
        self.fc = nn.Linear(DIM, NCLS)
        nn.init.uniform_(self.words.weight, -1.0 / DIM, 1.0 / DIM)
        nn.init.uniform_(self.ngrams.weight, -1.0 / DIM, 1.0 / DIM)
        nn.init.zeros_(self.fc.weight)

    def forward(self, text, offsets, bigrams, big_offsets, big_weights):
        h = self.words(text, offsets)
        h = h + self.ngrams(bigrams, big_offsets, per_sample_weights=big_weights)
        return self.fc(h)


def batch(n):
    lengths = torch.randint(MINLEN, MAXLEN + 1, (n,), device=device)
    total = int(lengths.sum().item())
    text = torch.randint(0, V, (total,), device=device)
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)[:-1]])
    # bigram (w_i, w_{i+1}) at every flat position i, weighted 1 / (bigrams in its document);
    # a document's last word starts no bigram: its weight is 0
    bigrams = (text[:-1] * 116049371 + text[1:]) % BUCKETS
    big_weights = (1.0 / (lengths - 1).float()).repeat_interleave(lengths)[:-1]
    big_weights[offsets[1:] - 1] = 0.0
    big_offsets = offsets
    return text, offsets, bigrams, big_offsets, big_weights


model = FastText().to(device)
opt = torch.optim.Adagrad(model.parameters(), lr=0.5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(STEPS):
    inputs = batch(B)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(*inputs)
        loss = F.cross_entropy(logits, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} words {inputs[0].numel()} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del inputs, logits, loss, y
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    inputs = batch(EB)
    top5 = model(*inputs).float().softmax(-1).topk(5, dim=-1)
if device == "cuda":
    print(
        f"eval {top5.indices.shape} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
