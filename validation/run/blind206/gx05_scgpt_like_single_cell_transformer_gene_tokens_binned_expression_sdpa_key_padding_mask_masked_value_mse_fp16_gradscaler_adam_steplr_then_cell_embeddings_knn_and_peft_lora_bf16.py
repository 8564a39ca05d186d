"""An scGPT-like single-cell foundation model written by hand: cells as sequences of (gene, expression)
tokens.

Each cell: a <cls> token and up to 1,200 expressed genes (gene ids from a 30,000-gene vocabulary, a variable
number per cell, padded), expression values binned into 51 bins. Token embedding = gene embedding (LayerNorm)
+ value embedding (nn.Embedding of the bins), plus a batch-effect (condition) embedding. 12 pre-LN blocks
(d 512, 8 heads, FFN 2048, GELU) with F.scaled_dot_product_attention and a boolean key-padding mask.
Pretraining: masked expression modelling (40% of the non-padding values masked to a <mask> bin, an MLP
regresses the continuous value, MSE on masked positions) plus a cell-type classifier on <cls> (100 types).

Phases: the first step (batch 32, fp16 autocast, GradScaler from 4096, Adam eps 1e-4, StepLR); 2 more steps;
cell embeddings of 256 cells under inference_mode (the <cls> state, L2-normalised on the GPU, cosine
similarity matrix and a 15-nearest-neighbour graph by topk); then peft LoRA (rank 8 on the attention
in-projection and out-projection, the base frozen) for perturbation classification under bf16 autocast with
AdamW, 3 steps. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2065)
if SMALL:
    GENES, D, LAYERS, HEADS, MAXLEN, BATCH, N_EMB = 500, 64, 2, 4, 64, 4, 16
else:
    GENES, D, LAYERS, HEADS, MAXLEN, BATCH, N_EMB = 30000, 512, 12, 8, 1200, 32, 256
BINS, MASK_BIN, CELL_TYPES, CONDITIONS, PERTURBATIONS = 51, 51, 100, 8, 20
PAD_GENE, CLS_GENE = 0, 1
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(D)
        self.in_proj = nn.Linear(D, 3 * D)
        self.out_proj = nn.Linear(D, D)
        self.norm2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, keep):
        b, t, _ = x.shape
        q, k, v = self.in_proj(self.norm1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(
            q, k, v, attn_mask=keep[:, None, None, :], dropout_p=0.1 if self.training else 0.0
        )
        x = x + self.drop(self.out_proj(a.transpose(1, 2).reshape(b, t, D)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm2(x)))))


class CellModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.gene = nn.Embedding(GENES, D, padding_idx=PAD_GENE)
        self.gene_norm = nn.LayerNorm(D)
        self.value = nn.Embedding(BINS + 1, D)
        self.condition = nn.Embedding(CONDITIONS, D)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(D)
        self.expr_head = nn.Sequential(nn.Linear(D, D), nn.LeakyReLU(), nn.Linear(D, 1))
        self.cls_head = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, CELL_TYPES))

    def forward(self, genes, bins, cond):
        keep = genes != PAD_GENE
        x = self.gene_norm(self.gene(genes)) + self.value(bins) + self.condition(cond)[:, None]
        for blk in self.blocks:
            x = blk(x, keep)
        return self.norm(x)


def cells(batch):
    """Random cells: <cls> then a variable number of expressed genes (at least half the window), padded."""
    n_genes = torch.randint(MAXLEN // 2, MAXLEN, (batch,), device=device)
    pos = torch.arange(MAXLEN, device=device)
    genes = torch.randint(2, GENES, (batch, MAXLEN), device=device)
    genes = genes.masked_fill(pos[None] >= n_genes[:, None], PAD_GENE)
    genes[:, 0] = CLS_GENE
    expr = torch.rand(batch, MAXLEN, device=device) * (genes != PAD_GENE)
    bins = (expr * (BINS - 1)).long()
    cond = torch.randint(0, CONDITIONS, (batch,), device=device)
    return genes, bins, expr, cond


def masked_mse_loss(pred, target, mask):
    """scGPT's masked_mse_loss: MSE over the masked positions only, by multiplying with the mask."""
    mask = mask.float()
    return F.mse_loss(pred * mask, target * mask, reduction="sum") / mask.sum()


model = CellModel().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-4)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
scaler = torch.amp.GradScaler("cuda", init_scale=4096.0, enabled=amp)

model.train()
for step in range(3):
    genes, bins, expr, cond = cells(BATCH)
    masked = (torch.rand(genes.shape, device=device) < 0.4) & (genes > CLS_GENE)
    bins_in = bins.masked_fill(masked, MASK_BIN)
    cell_type = torch.randint(0, CELL_TYPES, (BATCH,), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        h = model(genes, bins_in, cond)
        pred = model.expr_head(h).squeeze(-1)
        logits = model.cls_head(h[:, 0])
    mse = masked_mse_loss(pred.float(), expr, masked)
    loss = mse + F.cross_entropy(logits.float(), cell_type)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    sched.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} mse {mse.item():.4f} scale {scaler.get_scale()}")
    if step == 0:
        report("first step")
report("fp16 pretraining")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    genes, bins, _, cond = cells(N_EMB)
    emb = F.normalize(model(genes, bins, cond)[:, 0].float(), dim=-1)
    sim = emb @ emb.T
    knn = sim.topk(16, dim=-1).indices[:, 1:]
    print(
        f"cell embeddings {tuple(emb.shape)} mean neighbour similarity {sim.gather(1, knn).mean().item():.4f}"
    )
del emb, sim, knn
report("cell embeddings")

model.cls_head = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, PERTURBATIONS)).to(device)
del opt, sched
lora = LoraConfig(
    r=8,
    lora_alpha=16,
    lora_dropout=0.05,
    target_modules=["in_proj", "out_proj"],
    modules_to_save=["cls_head"],
)
peft_model = get_peft_model(model, lora)
peft_model.print_trainable_parameters()
ft_opt = torch.optim.AdamW(
    [p for p in peft_model.parameters() if p.requires_grad], lr=5e-4, weight_decay=0.01
)
peft_model.train()
for step in range(3):
    genes, bins, _, cond = cells(BATCH)
    target = torch.randint(0, PERTURBATIONS, (BATCH,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        h = peft_model(genes, bins, cond)
        loss = F.cross_entropy(peft_model.cls_head(h[:, 0]).float(), target)
    loss.backward()
    ft_opt.step()
    ft_opt.zero_grad(set_to_none=True)
    print(f"lora step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
