"""A BiLSTM-CRF named-entity tagger as Lample et al. (2016) describe it and the PyTorch tutorials
write it: characters of every word (up to 16, padded) through a character embedding of 50 and a
bidirectional nn.LSTM of 50 units a direction (the final states of both directions taken), joined
to a 300-dimensional word embedding of a 400,000-word vocabulary, dropout 0.5, a bidirectional
word-level nn.LSTM of 384 units a direction, a linear layer to 17 BIOES tags; a linear-chain CRF
whose partition function is the forward algorithm written as a Python loop over the 80 time steps
(alpha = logsumexp(alpha + transitions + emissions), kept where the mask is off by torch.where) and
whose gold-path score gathers the emissions and transitions; sentences of 5..80 words padded,
fp32, Adam (lr 1e-3) with clip_grad_norm_ at 5.0, batch 384, 3 steps; then Viterbi decoding of
2,048 sentences under no_grad (max and argmax a step, the back-pointers stacked, the best path
traced back with gather); 5 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15005)
V, NCH, WEMB, CEMB, CHID, HID, K, B, T, WLEN, STEPS, EB = (
    (1000, 60, 16, 8, 8, 16, 17, 8, 12, 6, 2, 16)
    if SMALL
    else (400_000, 120, 300, 50, 50, 384, 17, 384, 80, 16, 3, 2048)
)
START, STOP = K, K + 1  # two extra states of the CRF
device = "cuda" if torch.cuda.is_available() else "cpu"


class BiLSTMCRF(nn.Module):
    def __init__(self):
        super().__init__()
        self.wemb = nn.Embedding(V, WEMB, padding_idx=0)
        self.cemb = nn.Embedding(NCH, CEMB, padding_idx=0)
        self.char_lstm = nn.LSTM(CEMB, CHID, batch_first=True, bidirectional=True)
        self.drop = nn.Dropout(0.5)
        self.lstm = nn.LSTM(WEMB + 2 * CHID, HID, batch_first=True, bidirectional=True)
        self.hidden2tag = nn.Linear(2 * HID, K + 2)
        self.transitions = nn.Parameter(torch.randn(K + 2, K + 2))  # [from, to]
        with torch.no_grad():
            self.transitions[:, START] = -10000.0
            self.transitions[STOP, :] = -10000.0

    def emissions(self, words, chars):
        b, t = words.shape
        _, (h, _) = self.char_lstm(self.cemb(chars.view(b * t, -1)))
        char_feat = torch.cat([h[0], h[1]], dim=-1).view(b, t, -1)
        x = self.drop(torch.cat([self.wemb(words), char_feat], dim=-1))
        out, _ = self.lstm(x)
        return self.hidden2tag(self.drop(out))

    def log_partition(self, feats, mask):
        alpha = feats.new_full((feats.size(0), K + 2), -10000.0)
        alpha[:, START] = 0.0
        for t in range(feats.size(1)):
            nxt = torch.logsumexp(
                alpha.unsqueeze(2) + self.transitions.unsqueeze(0) + feats[:, t].unsqueeze(1), dim=1
            )
            alpha = torch.where(mask[:, t].unsqueeze(1), nxt, alpha)
        return torch.logsumexp(alpha + self.transitions[:, STOP].unsqueeze(0), dim=1)

    def gold_score(self, feats, tags, mask):
        emit = feats.gather(2, tags.unsqueeze(2)).squeeze(2)
        prev = torch.cat([tags.new_full((tags.size(0), 1), START), tags[:, :-1]], dim=1)
        trans = self.transitions[prev, tags]
        score = ((emit + trans) * mask).sum(1)
        last = tags.gather(1, (mask.sum(1).long() - 1).unsqueeze(1)).squeeze(1)
        return score + self.transitions[last, STOP]

    def neg_log_likelihood(self, words, chars, tags, mask):
        feats = self.emissions(words, chars)
        return (self.log_partition(feats, mask) - self.gold_score(feats, tags, mask)).mean()

    def viterbi(self, words, chars, mask):
        feats = self.emissions(words, chars)
        score = feats.new_full((feats.size(0), K + 2), -10000.0)
        score[:, START] = 0.0
        pointers = []
        for t in range(feats.size(1)):
            best, idx = (score.unsqueeze(2) + self.transitions.unsqueeze(0)).max(dim=1)
            pointers.append(idx)
            score = torch.where(mask[:, t].unsqueeze(1), best + feats[:, t], score)
        score = score + self.transitions[:, STOP].unsqueeze(0)
        best_score, last = score.max(dim=1)
        pointers = torch.stack(pointers, dim=1)  # (b, t, K + 2)
        path = [last]
        for t in range(feats.size(1) - 1, 0, -1):
            prev = pointers[:, t].gather(1, path[-1].unsqueeze(1)).squeeze(1)
            path.append(torch.where(mask[:, t], prev, path[-1]))
        return best_score, torch.stack(path[::-1], dim=1)


def make_batch(n):
    lengths = torch.randint(5, T + 1, (n,), device=device)
    mask = torch.arange(T, device=device).unsqueeze(0) < lengths.unsqueeze(1)
    words = torch.randint(1, V, (n, T), device=device) * mask
    chars = torch.randint(1, NCH, (n, T, WLEN), device=device) * mask.unsqueeze(2)
    tags = torch.randint(0, K, (n, T), device=device) * mask
    return words, chars, tags, mask


model = BiLSTMCRF().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    words, chars, tags, mask = make_batch(B)
    loss = model.neg_log_likelihood(words, chars, tags, mask)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} nll {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss
model.eval()
with torch.no_grad():
    words, chars, _, mask = make_batch(EB)
    best_score, path = model.viterbi(words, chars, mask)
if device == "cuda":
    print(
        f"viterbi {tuple(path.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
