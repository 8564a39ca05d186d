"""A NaViT-style ("Patch n' Pack") image classifier: every image keeps its own resolution and aspect ratio
(sides drawn on the host from 128 to 384 in steps of 32), is cut into 16 x 16 patches by view/permute
(no convolution), and the images' patches are packed into one (T, 768) tensor; a dense Linear embeds
them, factorized row and column position embeddings are added by index, a per-image token-drop rate
(NaViT's continuous token dropping, drawn per image on the host) keeps a random subset, and
`torch.nested.nested_tensor_from_jagged` wraps the packed rows so that Linear, LayerNorm and
`F.scaled_dot_product_attention` see each image as its own sequence. 8 pre-norm blocks of 512 wide,
8 heads; each image's rows are mean-pooled from the packed values by `index_add_` over per-token
image ids (`repeat_interleave` of the lengths) into the head.

Phases: 0 model, fused AdamW and the packed batches; 1 three training steps, fp32 weights under bf16
autocast, attention restricted to `sdpa_kernel([SDPBackend.FLASH_ATTENTION])`; 2 evaluation of larger
images with no token drop in plain fp32 with `torch.set_float32_matmul_precision("high")` and
`sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION])` under no_grad; 3 the same batch as a padded dense
batch (`to_padded_tensor`) with a boolean key mask of shape (B, 1, 1, S) through
`sdpa_kernel([CUDNN_ATTENTION, EFFICIENT_ATTENTION], set_priority=True)`, bf16 under inference_mode,
checking that packed and padded logits agree."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(3371)
gen = torch.Generator().manual_seed(3371)
dev = "cuda"
P, D, H, L, NCLS, MAXP = 16, 512, 8, 8, 1000, 24
B_TRAIN, B_EVAL, STEPS = 48, 32, 3


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
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x, mask=None):
        q, k, v = self.qkv(self.n1(x)).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (H, D // H)).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).flatten(-2))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x)), approximate="tanh"))


class NaViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3 * P * P, D)
        self.row = nn.Embedding(MAXP, D)
        self.col = nn.Embedding(MAXP, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, NCLS)

    def tokens(self, batch):
        return self.embed(batch["patches"]) + self.row(batch["rows"]) + self.col(batch["cols"])

    def forward(self, batch):
        x = torch.nested.nested_tensor_from_jagged(self.tokens(batch), batch["offsets"])
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x).values()
        pooled = x.new_zeros(batch["lengths"].shape[0], D).index_add_(0, batch["image_ids"], x)
        return self.head(pooled / batch["lengths"][:, None].to(x.dtype))

    def forward_padded(self, batch):
        x = torch.nested.nested_tensor_from_jagged(self.tokens(batch), batch["offsets"])
        lengths = batch["lengths"]
        x = torch.nested.to_padded_tensor(x, 0.0)
        keep = torch.arange(x.shape[1], device=dev)[None, :] < lengths[:, None]
        mask = keep[:, None, None, :]
        for blk in self.blocks:
            x = blk(x, mask)
        x = self.norm(x) * keep[..., None]
        return self.head(x.sum(1) / lengths[:, None].to(x.dtype))


def patchify(img):
    c, h, w = img.shape
    p = img.view(c, h // P, P, w // P, P).permute(1, 3, 0, 2, 4)
    return p.reshape(-1, c * P * P)


def make_batch(n, lo, hi, drop_max):
    patches, rows, cols, lengths = [], [], [], []
    for _ in range(n):
        h = int(torch.randint(lo // 32, hi // 32 + 1, (1,), generator=gen)) * 32
        w = int(torch.randint(lo // 32, hi // 32 + 1, (1,), generator=gen)) * 32
        gh, gw = h // P, w // P
        drop = float(torch.rand(1, generator=gen)) * drop_max
        keep = max(1, round(gh * gw * (1.0 - drop)))
        idx = torch.randperm(gh * gw, generator=gen)[:keep].sort().values
        img = torch.randn(3, h, w, device=dev)
        patches.append(patchify(img)[idx.to(dev)])
        rows.append(idx // gw)
        cols.append(idx % gw)
        lengths.append(keep)
    lens = torch.tensor(lengths)
    return {
        "patches": torch.cat(patches),
        "rows": torch.cat(rows).to(dev),
        "cols": torch.cat(cols).to(dev),
        "offsets": F.pad(lens.cumsum(0), (1, 0)).to(dev),
        "lengths": lens.to(dev),
        "image_ids": torch.repeat_interleave(torch.arange(n), lens).to(dev),
        "labels": torch.randint(0, NCLS, (n,), generator=gen).to(dev),
    }


model = NaViT().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05, fused=True)
train_batches = [make_batch(B_TRAIN, 128, 384, 0.5) for _ in range(STEPS)]
print("packed tokens", [int(b["offsets"][-1]) for b in train_batches])
report("model, optimizer and packed batches")

for step, batch in enumerate(train_batches):
    with torch.autocast("cuda", dtype=torch.bfloat16), sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        logits = model(batch)
    loss = F.cross_entropy(logits.float(), batch["labels"], label_smoothing=0.1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
del logits, loss, train_batches
report("jagged flash bf16 autocast training")

torch.set_float32_matmul_precision("high")
model.eval()
eval_batch = make_batch(B_EVAL, 256, 384, 0.0)
with torch.no_grad(), sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
    packed_logits = model(eval_batch)
print("eval tokens", int(eval_batch["offsets"][-1]), "pred", packed_logits.argmax(-1)[:8].tolist())
report("jagged efficient fp32 tf32 eval")

model.to(torch.bfloat16)
with (
    torch.inference_mode(),
    sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION], set_priority=True),
):
    eval_batch["patches"] = eval_batch["patches"].to(torch.bfloat16)
    padded_logits = model.forward_padded(eval_batch).float()
    agree = (padded_logits.argmax(-1) == packed_logits.argmax(-1)).float().mean()
print(f"padded vs packed agreement {agree.item():.3f}")
report("padded dense bf16 cudnn-priority masked sdpa")
