"""Masked-language-model pretraining of a BERT-style encoder written by hand: 4 layers, hidden 768, 12 heads
(SDPA with a padding mask), intermediate 3072, the BERT vocabulary of 30,522 word pieces, the MLM head as
BERT's (dense + GELU + LayerNorm, then a decoder tied to the word embeddings with its own bias), fp32
weights, compiled with `torch.compile(model)` (default mode) and trained under fp16 autocast with a
`GradScaler` and AdamW (foreach), batch 16 x 256 with 15% of positions masked (loss over every position,
ignore_index -100): the first step (compile), three more steps, then evaluation under `no_grad`.

The decoder's addmm has N = 30,522 (not a multiple of 8): Inductor's pad_mm pass considers padding it.
The mask is fixed per batch from a seeded generator; no value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2523)
V, D, H, L, FF, T, B = 30522, 768, 12, 4, 3072, 256, 16


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.ln1, self.ln2 = nn.LayerNorm(D, eps=1e-12), nn.LayerNorm(D, eps=1e-12)
        self.inter, self.output = nn.Linear(D, FF), nn.Linear(FF, D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1 if self.training else 0.0)
        x = self.ln1(x + self.drop(self.out(a.transpose(1, 2).reshape(b, t, D))))
        return self.ln2(x + self.drop(self.output(F.gelu(self.inter(x)))))


class BertMLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.word, self.pos, self.typ = nn.Embedding(V, D), nn.Embedding(512, D), nn.Embedding(2, D)
        self.emb_ln, self.emb_drop = nn.LayerNorm(D, eps=1e-12), nn.Dropout(0.1)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.transform, self.t_ln = nn.Linear(D, D), nn.LayerNorm(D, eps=1e-12)
        self.decoder = nn.Linear(D, V)
        self.decoder.weight = self.word.weight

    def forward(self, ids, attn, labels):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.emb_drop(self.emb_ln(self.word(ids) + self.pos(pos) + self.typ(torch.zeros_like(ids))))
        mask = attn[:, None, None, :].bool()
        for layer in self.layers:
            x = layer(x, mask)
        logits = self.decoder(self.t_ln(F.gelu(self.transform(x))))
        return F.cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100)


model = BertMLM().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
scaler = torch.amp.GradScaler("cuda")
cmodel = torch.compile(model)
gen = torch.Generator(device="cuda").manual_seed(7)
ids = torch.randint(1000, V, (4, B, T), device="cuda", generator=gen)
attn = torch.ones(4, B, T, dtype=torch.long, device="cuda")
attn[:, :, 200:] = 0
masked = torch.rand(4, B, T, device="cuda", generator=gen) < 0.15
labels = torch.where(masked, ids, torch.full_like(ids, -100))
inputs = torch.where(masked, torch.full_like(ids, 103), ids)
report("setup")


def step(i):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = cmodel(inputs[i], attn[i], labels[i])
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


step(0)
report("first_step_compile")

for i in range(1, 4):
    step(i)
report("steps_2_4")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    losses = [cmodel(inputs[i], attn[i], labels[i]) for i in range(4)]
    print("eval loss", round(torch.stack(losses).mean().item(), 3))
    del losses
report("eval")
