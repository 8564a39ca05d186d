"""CTR prediction with xDeepFM: 26 one-hot fields in one shared embedding table (field offsets,
3.4 M rows of 16), 3 multi-hot tag fields through nn.EmbeddingBag(mode="sum") with per-sample
tf-idf weights and bag offsets built on the host (bags of 0 to 24 tags), a compressed interaction
network (outer products by einsum, 1-wide Conv1d compressions of 200, 200 and 100 maps, sum
pooled), a 400-400 DNN and a first-order linear part; BCE-with-logits, Adagrad for 3 steps of
batch 4,096, then scoring 2 batches of 16,384 under torch.inference_mode with a rank-based AUC
(argsort on the GPU); 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10605)
if SMALL:
    VOCABS, TAG_VOCAB, B, EB, CIN, DNN = [50] * 26, 100, 32, 64, [8, 8], [16, 16]
else:
    VOCABS = [1_000_000, 800_000, 500_000, 400_000, 300_000] + [20_000] * 21
    TAG_VOCAB, B, EB, CIN, DNN = 200_000, 4096, 16384, [200, 200, 100], [400, 400]
D, TAGS, MAX_TAGS = 16, 3, 24
device = "cuda" if torch.cuda.is_available() else "cpu"
offsets = torch.tensor([0, *VOCABS[:-1]]).cumsum(0)


class XDeepFM(nn.Module):
    def __init__(self):
        super().__init__()
        m = len(VOCABS) + TAGS
        self.embed = nn.Embedding(sum(VOCABS), D)
        self.linear = nn.Embedding(sum(VOCABS), 1)
        self.tags = nn.ModuleList(nn.EmbeddingBag(TAG_VOCAB, D, mode="sum") for _ in range(TAGS))
        self.register_buffer("field_offsets", offsets.clone())
        convs, prev = [], m
        for h in CIN:
            convs.append(nn.Conv1d(prev * m, h, 1))
            prev = h
        self.cin = nn.ModuleList(convs)
        layers, width = [], m * D
        for h in DNN:
            layers += [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU(inplace=True), nn.Dropout(0.2)]
            width = h
        self.dnn = nn.Sequential(*layers, nn.Linear(width, 1))
        self.cin_out = nn.Linear(sum(CIN), 1)

    def forward(self, cats, bags):
        idx = cats + self.field_offsets
        x0 = torch.cat(
            [self.embed(idx)]
            + [t(i, o, per_sample_weights=w)[:, None] for t, (i, o, w) in zip(self.tags, bags, strict=True)],
            1,
        )
        b, _, d = x0.shape
        xk, pooled = x0, []
        for conv in self.cin:
            z = torch.einsum("bhd,bmd->bhmd", xk, x0).reshape(b, -1, d)
            xk = F.relu(conv(z))
            pooled.append(xk.sum(-1))
        logit = self.linear(idx).sum(1) + self.cin_out(torch.cat(pooled, 1)) + self.dnn(x0.flatten(1))
        return logit.squeeze(1)


def make_batch(n):
    cats = torch.stack([torch.randint(0, v, (n,)) for v in VOCABS], 1)
    bags = []
    for _ in range(TAGS):
        lengths = torch.randint(0, MAX_TAGS + 1, (n,))
        bag_offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
        tags = torch.randint(0, TAG_VOCAB, (int(lengths.sum()),))
        weights = torch.rand(tags.numel()) / lengths.clamp_min(1).repeat_interleave(lengths)
        bags.append((tags.to(device), bag_offsets.to(device), weights.to(device)))
    clicks = (torch.rand(n) < 0.25).float()
    return cats.to(device), bags, clicks.to(device)


model = XDeepFM().to(device)
opt = torch.optim.Adagrad(model.parameters(), lr=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    cats, bags, clicks = make_batch(B)
    loss = F.binary_cross_entropy_with_logits(model(cats, bags), clicks)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del cats, bags, clicks, loss
model.eval()
with torch.inference_mode():
    scores, labels = [], []
    for _ in range(2):
        cats, bags, clicks = make_batch(EB)
        scores.append(model(cats, bags))
        labels.append(clicks)
    s, y = torch.cat(scores), torch.cat(labels)
    ranks = torch.empty_like(s)
    ranks[s.argsort()] = torch.arange(1, s.numel() + 1, device=device, dtype=s.dtype)
    n_pos = y.sum()
    auc = (ranks[y.bool()].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * (s.numel() - n_pos))
if device == "cuda":
    print(
        f"eval auc {auc.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
