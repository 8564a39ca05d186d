"""A Transformer-base translation model (nn.Transformer: 6 + 6 layers, width 512, 8 heads,
feed-forward 2,048, shared 16,000-token embeddings and output projection, sinusoidal positions)
trained with token-budget batches under the allocator's garbage collector and a memory cap:
PYTORCH_CUDA_ALLOC_CONF="garbage_collection_threshold:0.5,max_split_size_mb:256" set before torch is
imported and set_per_process_memory_fraction(0.06); a seeded CPU generator draws 4,000 sentence
pairs (source 5 to 200 tokens, target about 1.1 times as long), sorts them by length and cuts
batches of at most 6,000 padded source tokens, each padded to its own longest, taken in a shuffled
order; key-padding masks and a causal mask, fp16 autocast with GradScaler, Adam (betas 0.9/0.98,
foreach=False) with inverse-square-root warm-up, label smoothing 0.1; 60 steps in three phases
of 20, then greedy decoding (memory reused, the target grown by torch.cat) of 3 batches; 5 phases."""

import math
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "garbage_collection_threshold:0.5,max_split_size_mb:256"

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14306)
V, D, HEADS, LAYERS, FF = (500, 32, 4, 1, 64) if SMALL else (16000, 512, 8, 6, 2048)
PAIRS, LO, HI, BUDGET = (60, 3, 20, 64) if SMALL else (4000, 5, 200, 6000)
STEPS, PER_PHASE = (6, 2) if SMALL else (60, 20)
DECODE_N, DECODE_MAX = (2, 8) if SMALL else (3, 64)
PAD, BOS, EOS = 0, 1, 2
FRACTION = 0.06
device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    torch.cuda.set_per_process_memory_fraction(FRACTION)


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D, padding_idx=PAD)
        self.core = nn.Transformer(D, HEADS, LAYERS, LAYERS, FF, dropout=0.1, batch_first=True)
        pos = torch.arange(1024)[:, None] * torch.exp(torch.arange(0, D, 2) * (-math.log(10000.0) / D))
        pe = torch.zeros(1024, D)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos), torch.cos(pos)
        self.register_buffer("pe", pe, persistent=False)

    def emb(self, ids):
        return self.embed(ids) * math.sqrt(D) + self.pe[: ids.shape[1]]

    def encode(self, src):
        return self.core.encoder(self.emb(src), src_key_padding_mask=src == PAD)

    def decode(self, tgt, memory, src_pad):
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        h = self.core.decoder(self.emb(tgt), memory, tgt_mask=causal, tgt_key_padding_mask=tgt == PAD,
                              memory_key_padding_mask=src_pad)
        return F.linear(h, self.embed.weight)

    def forward(self, src, tgt):
        return self.decode(tgt, self.encode(src), src == PAD)


gen = torch.Generator().manual_seed(21)
src_len = torch.randint(LO, HI + 1, (PAIRS,), generator=gen)
tgt_len = (src_len.float() * (1.0 + 0.2 * torch.rand(PAIRS, generator=gen))).long().clamp(max=int(HI * 1.2))
order = torch.argsort(src_len * 1000 + tgt_len).tolist()
batches, cur = [], []
for i in order:
    longest = max([int(src_len[j]) for j in cur + [i]])
    if cur and longest * (len(cur) + 1) > BUDGET:
        batches.append(cur)
        cur = []
    cur.append(i)
batches.append(cur)
shuffle = torch.randperm(len(batches), generator=gen).tolist()


def tensors(idx):
    s_max = max(int(src_len[i]) for i in idx)
    t_max = max(int(tgt_len[i]) for i in idx) + 1
    src = torch.full((len(idx), s_max), PAD, dtype=torch.long)
    tgt = torch.full((len(idx), t_max + 1), PAD, dtype=torch.long)
    for r, i in enumerate(idx):
        n, m = int(src_len[i]), int(tgt_len[i])
        src[r, :n] = torch.randint(3, V, (n,), generator=gen)
        tgt[r, 0] = BOS
        tgt[r, 1:m + 1] = torch.randint(3, V, (m,), generator=gen)
        tgt[r, m + 1] = EOS
    return src.to(device), tgt.to(device)


model = Seq2Seq().to(device)
opt = torch.optim.Adam(model.parameters(), lr=7e-4, betas=(0.9, 0.98), eps=1e-9, foreach=False)
warm = 4000
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) ** -0.5, (s + 1) * warm ** -1.5) * warm ** 0.5)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()} batches {len(batches)}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    src, tgt = tensors(batches[shuffle[step % len(shuffle)]])
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt[:, 1:].flatten(), ignore_index=PAD,
                               label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    sched.step()
    if (step + 1) % PER_PHASE == 0 and device == "cuda":
        print(
            f"steps to {step} batch {tuple(src.shape)} -> {tuple(tgt.shape)} loss {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
del src, tgt, logits, loss

model.eval()
produced = 0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    for k in range(DECODE_N):
        src, _ = tensors(batches[shuffle[-1 - k]])
        memory = model.encode(src)
        out = torch.full((src.shape[0], 1), BOS, dtype=torch.long, device=device)
        for _ in range(DECODE_MAX):
            nxt = model.decode(out, memory, src == PAD)[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], dim=1)
        produced += out.numel()
        del memory, out, src
if device == "cuda":
    print(f"decoded {produced} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
print(f"done {produced > 0}")
