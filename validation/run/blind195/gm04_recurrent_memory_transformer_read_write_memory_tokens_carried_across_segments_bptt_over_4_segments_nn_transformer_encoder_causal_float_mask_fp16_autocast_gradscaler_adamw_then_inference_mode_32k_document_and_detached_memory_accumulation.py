"""A Recurrent Memory Transformer (Bulatov et al. 2022) for long documents: 16 memory tokens are read at
the start of every segment and written at its end, and the written memory is carried into the next
segment.

Backbone: token embedding (32,000 x 768) plus learned positions for the 16 + 1,024 + 16 slots, an
nn.TransformerEncoder of 6 nn.TransformerEncoderLayer (768 wide, 12 heads, feed-forward 3,072, GELU,
norm_first, batch_first, dropout 0.1) with a float causal mask from
nn.Transformer.generate_square_subsequent_mask in which the read-memory slots are visible to every
position and the write slots see everything; a final LayerNorm and a language-model head (768 -> 32,000).
The 16 initial memory embeddings are a parameter. Training: documents of 4 segments of 1,024 tokens at
batch 8; the memory passes between segments with its gradient (backpropagation through all 4 segments,
the loss summed over segments and divided by 4), under fp16 autocast with torch.amp.GradScaler (default
settings), AdamW (lr 1e-4, weight decay 0.01), unscale_ + clip_grad_norm_ 1.0.

Phases: the first step; 3 more steps; evaluation of a 32,768-token document (32 segments) at batch 2 under
torch.inference_mode and fp16 autocast, the memory carried; then a cheaper variant with the memory
detached after every segment (truncated BPTT of one segment), each segment's loss backpropagated at
once, the gradients accumulated over the 4 segments of 2 documents before one scaler step. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19504)
if SMALL:
    VOCAB, D, LAYERS, HEADS, FFN, N_MEM = 500, 64, 2, 4, 128, 4
    SEG, N_SEG, B, STEPS, EVAL_SEGS, EVAL_B = 64, 2, 2, 1, 3, 1
else:
    VOCAB, D, LAYERS, HEADS, FFN, N_MEM = 32000, 768, 6, 12, 3072, 16
    SEG, N_SEG, B, STEPS, EVAL_SEGS, EVAL_B = 1024, 4, 8, 3, 32, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class RMT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.randn(1, 2 * N_MEM + SEG, D) * 0.02)
        self.memory = nn.Parameter(torch.randn(1, N_MEM, D) * 0.02)
        layer = nn.TransformerEncoderLayer(
            D, HEADS, FFN, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)
        n = 2 * N_MEM + SEG
        mask = nn.Transformer.generate_square_subsequent_mask(n)
        mask[:, :N_MEM] = 0.0  # read memory visible to all
        mask[-N_MEM:, :] = 0.0  # write memory sees the whole segment
        self.register_buffer("mask", mask, persistent=False)

    def init_memory(self, b):
        return self.memory.expand(b, -1, -1)

    def forward(self, ids, mem):
        x = torch.cat([mem, self.tok(ids), mem], 1) + self.pos
        h = self.encoder(x, mask=self.mask)
        logits = self.head(self.norm(h[:, N_MEM:-N_MEM]))
        return logits, h[:, -N_MEM:]


model = RMT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def document(b, n_seg):
    return torch.randint(0, VOCAB, (b, n_seg * SEG + 1), device=device)


def bptt_step():
    doc = document(B, N_SEG)
    mem = model.init_memory(B)
    total = 0.0
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        for s in range(N_SEG):
            logits, mem = model(doc[:, s * SEG : (s + 1) * SEG], mem)
            y = doc[:, s * SEG + 1 : (s + 1) * SEG + 1]
            total = total + F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))
        loss = total / N_SEG
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    return loss.item()


model.train()
print(f"step 0 loss {bptt_step():.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = bptt_step()
print(f"step {STEPS} loss {loss:.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
doc = document(EVAL_B, EVAL_SEGS)
nll = torch.zeros((), device=device)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    mem = model.init_memory(EVAL_B)
    for s in range(EVAL_SEGS):
        logits, mem = model(doc[:, s * SEG : (s + 1) * SEG], mem)
        y = doc[:, s * SEG + 1 : (s + 1) * SEG + 1]
        nll += F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1), reduction="sum")
print(f"eval nll/token over {EVAL_SEGS * SEG} tokens {(nll / (EVAL_B * EVAL_SEGS * SEG)).item():.4f}")
del logits, mem
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
opt.zero_grad(set_to_none=True)
for _ in range(2):
    doc = document(B, N_SEG)
    mem = model.init_memory(B)
    for s in range(N_SEG):
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            logits, mem = model(doc[:, s * SEG : (s + 1) * SEG], mem)
            y = doc[:, s * SEG + 1 : (s + 1) * SEG + 1]
            loss = F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1)) / (2 * N_SEG)
        scaler.scale(loss).backward()
        mem = mem.detach()
scaler.unscale_(opt)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(opt)
scaler.update()
print(f"detached-memory step loss {loss.item() * 2 * N_SEG:.4f}")
if device == "cuda":
    print(
        f"detached allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
