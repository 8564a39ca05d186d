"""A character-level LSTM language model trained by truncated backpropagation through time, as
Karpathy's char-rnn and the PyTorch word_language_model example write it: a byte vocabulary (256),
a 128-dimensional embedding, a 3-layer nn.LSTM of 2,048 units (dropout 0.25 between layers,
batch_first=False), a linear decoder; one stream of bytes cut into 192 parallel streams, read in
chunks of 256 steps with the hidden state carried across chunks and detached between them
(repackage_hidden); fp16 autocast with a GradScaler, Adam (lr 2e-3), the gradients unscaled and
clipped at 5.0; 4 chunks; then 512 samples of 300 bytes drawn one step at a time at temperature
0.8 under no_grad (the hidden state fed back, torch.multinomial on the softmax); 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15003)
V, EMB, HID, LAYERS, B, BPTT, CHUNKS, NS, SLEN = (
    (256, 16, 64, 2, 8, 32, 2, 4, 20) if SMALL else (256, 128, 2048, 3, 192, 256, 4, 512, 300)
)
device = "cuda" if torch.cuda.is_available() else "cpu"


class CharLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.25)
        self.encoder = nn.Embedding(V, EMB)
        self.rnn = nn.LSTM(EMB, HID, LAYERS, dropout=0.25)
        self.decoder = nn.Linear(HID, V)

    def forward(self, x, hidden):
        emb = self.drop(self.encoder(x))
        out, hidden = self.rnn(emb, hidden)
        return self.decoder(self.drop(out)), hidden

    def init_hidden(self, bsz):
        w = next(self.parameters())
        return (w.new_zeros(LAYERS, bsz, HID), w.new_zeros(LAYERS, bsz, HID))


def repackage_hidden(h):
    return tuple(v.detach() for v in h)


stream = torch.randint(0, V, (B * (BPTT * CHUNKS + 1),), dtype=torch.uint8, device=device)
data = stream.view(B, -1).t().contiguous().long()  # (time, batch)
model = CharLM().to(device)
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
hidden = model.init_hidden(B)
for i in range(CHUNKS):
    x = data[i * BPTT : (i + 1) * BPTT]
    y = data[i * BPTT + 1 : (i + 1) * BPTT + 1]
    hidden = repackage_hidden(hidden)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        logits, hidden = model(x, hidden)
        loss = F.cross_entropy(logits.view(-1, V), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"chunk {i} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del logits, loss, hidden, x, y
model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    hidden = model.init_hidden(NS)
    tok = torch.full((1, NS), ord("\n"), dtype=torch.long, device=device)
    out = []
    for _ in range(SLEN):
        logits, hidden = model(tok, hidden)
        probs = F.softmax(logits[-1].float() / 0.8, dim=-1)
        tok = torch.multinomial(probs, 1).t()
        out.append(tok)
    samples = torch.cat(out).t().to(torch.uint8).cpu()
if device == "cuda":
    print(
        f"samples {tuple(samples.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
