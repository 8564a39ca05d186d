"""Memory mistakes in truncated backpropagation through time, written like PyTorch's
word_language_model example: a 2-layer cuDNN LSTM language model (embedding and hidden 1,024, tied
32,000-token decoder, dropout 0.2, fp32), batch 64 of 70-token windows in 4 consecutive windows
per phase, the update by hand (`p.data.add_(p.grad, alpha=-lr)`) after clip_grad_norm_. The mistake
first: the hidden state carried from window to window without being detached, so each backward has
to go through every earlier window too and `retain_graph=True` is added to silence the error, and the
loss summed as a tensor (`total_loss += loss`): every window's graph stays alive and each backward
is longer than the last; then the fix (`repackage_hidden` detaching h and c, `.item()` on the
loss), 4 windows; then the evaluation under no_grad at batch 10 over 4 windows of 140 tokens;
3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13303)
B, BPTT, EB, EBPTT, NHID, V, NW = (4, 8, 2, 16, 64, 500, 3) if SMALL else (64, 70, 10, 140, 1024, 32000, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"


class RNNModel(nn.Module):
    def __init__(self, ntoken, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, nhid)
        self.rnn = nn.LSTM(nhid, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.decoder.weight = self.encoder.weight
        self.nlayers, self.nhid = nlayers, nhid
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, inp, hidden):
        emb = self.drop(self.encoder(inp))
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.decoder.out_features)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (
            weight.new_zeros(self.nlayers, bsz, self.nhid),
            weight.new_zeros(self.nlayers, bsz, self.nhid),
        )


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


model = RNNModel(V, NHID, 2).to(device)
lr, clip = 20.0, 0.25
stream = torch.randint(0, V, (BPTT * NW * 2 + 1, B), device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def report(tag):
    if device == "cuda":
        print(
            f"{tag} allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def window(i):
    return stream[i : i + BPTT], stream[i + 1 : i + 1 + BPTT].reshape(-1)


# the mistake: hidden carried with its graph, retain_graph to silence the error, loss kept as a tensor
model.train()
hidden = model.init_hidden(B)
total_loss = 0.0
for w in range(NW):
    data, targets = window(w * BPTT)
    model.zero_grad()
    output, hidden = model(data, hidden)
    loss = F.nll_loss(output, targets)
    loss.backward(retain_graph=True)
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    total_loss += loss
report(f"no detach ppl {math.exp(total_loss.item() / NW):.1f}")
del total_loss, hidden, output, loss

# the fix
hidden = model.init_hidden(B)
total_loss = 0.0
for w in range(NW, 2 * NW):
    data, targets = window(w * BPTT)
    model.zero_grad()
    hidden = repackage_hidden(hidden)
    output, hidden = model(data, hidden)
    loss = F.nll_loss(output, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    total_loss += loss.item()
report(f"repackaged ppl {math.exp(total_loss / NW):.1f}")

model.eval()
val = torch.randint(0, V, (EBPTT * NW + 1, EB), device=device)
total_loss = 0.0
hidden = model.init_hidden(EB)
with torch.no_grad():
    for w in range(NW):
        data, targets = val[w * EBPTT : (w + 1) * EBPTT], val[w * EBPTT + 1 : (w + 1) * EBPTT + 1].reshape(-1)
        output, hidden = model(data, hidden)
        hidden = repackage_hidden(hidden)
        total_loss += len(data) * F.nll_loss(output, targets).item()
report(f"eval ppl {math.exp(total_loss / (EBPTT * NW)):.1f}")
