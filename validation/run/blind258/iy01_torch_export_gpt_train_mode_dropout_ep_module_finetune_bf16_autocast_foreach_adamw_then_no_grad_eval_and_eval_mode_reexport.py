"""Fine-tuning through `torch.export`: a 6-layer GPT-style model (d 768, 12 heads through SDPA, MLP 3,072,
vocab 16,000, dropout 0.1, fp32 weights) exported in train mode at batch 8 x 512 (the training IR keeps
`aten.dropout` and the autograd-visible ops), then `ep.module()` — whose parameters are the model's own
tensors — fine-tuned for three steps under bf16 autocast with foreach AdamW (the cross-entropy in fp32),
then evaluated under no_grad, then the model exported again in eval mode under no_grad and run at
batch 16 x 512.

No value read back from the GPU decides a size. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2581)
V, D, H, L, T, B = 16000, 768, 12, 6, 512, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D)
        x = x + self.drop(self.o(a))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.n2(x)))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(1, T, D))
        self.blocks = nn.Sequential(*[Block() for _ in range(L)])
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.emb(idx) + self.pos[:, : idx.shape[1]]
        return self.head(self.norm(self.blocks(x)))


model = GPT().cuda().train()
idx = torch.randint(0, V, (B, T), device="cuda")
ep = torch.export.export(model, (idx,))
report("export_train_mode")

gm = ep.module()
opt = torch.optim.AdamW(gm.parameters(), lr=3e-4, weight_decay=0.1)
for _ in range(3):
    x = torch.randint(0, V, (B, T), device="cuda")
    y = torch.randint(0, V, (B, T), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = gm(x)
    loss = F.cross_entropy(logits.float().view(-1, V), y.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
del logits, loss
report("finetune_ep_module_autocast_adamw")

with torch.no_grad():
    for _ in range(2):
        out = gm(torch.randint(0, V, (B, T), device="cuda"))
del out
report("no_grad_eval_train_ir")

model.eval()
with torch.no_grad():
    ep_eval = torch.export.export(model, (torch.randint(0, V, (16, T), device="cuda"),))
    out = ep_eval.module()(torch.randint(0, V, (16, T), device="cuda"))
del out
report("eval_mode_reexport_batch16")
