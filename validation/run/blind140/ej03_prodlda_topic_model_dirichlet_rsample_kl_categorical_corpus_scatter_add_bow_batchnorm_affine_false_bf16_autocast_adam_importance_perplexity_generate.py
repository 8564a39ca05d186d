"""ProdLDA neural topic model with a Dirichlet posterior (Srivastava and Sutton 2017, the Dirichlet
variant of Pyro's ProdLDA example written in plain torch.distributions): a 20,000-word vocabulary,
documents of 256 tokens drawn by a Zipf `Categorical` and turned into bag-of-words counts by
`scatter_add_`, an encoder of softplus Linear layers with dropout into 200 topics normalised by a
BatchNorm1d without affine, the concentration `softplus`ed and taken in fp32 for
`Dirichlet(...).rsample()` (`_sample_dirichlet`, `_dirichlet_grad` in backward) and
`kl_divergence` against a symmetric Dirichlet prior, the product-of-experts decoder (Linear
without bias into BatchNorm1d without affine, `log_softmax`); bf16 autocast around the network,
Adam (betas 0.99, 0.999), batch 2,048, 4 steps; then under no_grad an importance-sampled
held-out perplexity (8 posterior samples a document, `logsumexp`), the top 10 words of each topic
and 512 synthetic documents of 128 tokens sampled by `Categorical` from their word
distributions; 6 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical, Dirichlet, kl_divergence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14003)
V, K, HID, B, L = (300, 10, 32, 16, 20) if SMALL else (20000, 200, 512, 2048, 256)
S, EB, N_GEN, GEN_L = (2, 8, 4, 10) if SMALL else (8, 1024, 512, 128)
STEPS = 2 if SMALL else 4
device = "cuda" if torch.cuda.is_available() else "cpu"


class Encoder(nn.Module):
    def __init__(self, vocab, topics, hidden, dropout=0.2):
        super().__init__()
        self.fc1 = nn.Linear(vocab, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fcmu = nn.Linear(hidden, topics)
        self.bn = nn.BatchNorm1d(topics, affine=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, bow):
        h = F.softplus(self.fc1(bow))
        h = F.softplus(self.fc2(h))
        h = self.drop(h)
        return F.softplus(self.bn(self.fcmu(h)))


class Decoder(nn.Module):
    def __init__(self, vocab, topics, dropout=0.2):
        super().__init__()
        self.beta = nn.Linear(topics, vocab, bias=False)
        self.bn = nn.BatchNorm1d(vocab, affine=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, theta):
        return F.log_softmax(self.bn(self.beta(self.drop(theta))), dim=1)


class ProdLDA(nn.Module):
    def __init__(self, vocab, topics, hidden):
        super().__init__()
        self.encoder = Encoder(vocab, topics, hidden)
        self.decoder = Decoder(vocab, topics)
        self.register_buffer("prior", torch.full((topics,), 0.02))

    def forward(self, bow):
        conc = self.encoder(bow).float().clamp(min=1e-3)
        q = Dirichlet(conc)
        theta = q.rsample()
        log_word = self.decoder(theta)
        recon = -(bow * log_word.float()).sum(1)
        kl = kl_divergence(q, Dirichlet(self.prior.expand_as(conc)))
        return (recon + kl).mean()


zipf = 1.0 / torch.arange(1, V + 1, device=device, dtype=torch.float) ** 1.07
word_dist = Categorical(probs=zipf / zipf.sum())


def corpus(n, length):
    tokens = word_dist.sample((n, length))
    return torch.zeros(n, V, device=device).scatter_add_(1, tokens, torch.ones(n, length, device=device))


model = ProdLDA(V, K, HID).to(device)
opt = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.99, 0.999))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    bow = corpus(B, L)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(bow)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.2f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss, bow
model.eval()
total_ll, total_words = 0.0, 0.0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _b in range(2):
        bow = corpus(EB, L)
        conc = model.encoder(bow).float().clamp(min=1e-3)
        q = Dirichlet(conc)
        prior = Dirichlet(model.prior.expand_as(conc))
        theta = q.sample((S,))
        log_word = model.decoder(theta.reshape(S * EB, K)).float().reshape(S, EB, V)
        log_lik = (bow.unsqueeze(0) * log_word).sum(-1)
        log_w = log_lik + prior.log_prob(theta) - q.log_prob(theta)
        total_ll += (torch.logsumexp(log_w, dim=0) - math.log(S)).sum().item()
        total_words += bow.sum().item()
    topic_word = model.decoder.beta.weight.t().float()
    top_words = topic_word.topk(10, dim=1).indices
    theta = Dirichlet(model.prior.expand(N_GEN, K)).sample()
    gen_logits = model.decoder(theta).float()
    docs = Categorical(logits=gen_logits).sample((GEN_L,)).t()
    doc_len = torch.bincount(docs.flatten(), minlength=V)
if device == "cuda":
    print(
        f"nats/word {-total_ll / max(total_words, 1.0):.3f} words {int(doc_len.sum())}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
