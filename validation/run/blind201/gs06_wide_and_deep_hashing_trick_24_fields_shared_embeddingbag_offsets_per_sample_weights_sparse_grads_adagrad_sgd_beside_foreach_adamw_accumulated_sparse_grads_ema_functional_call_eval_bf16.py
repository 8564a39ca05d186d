"""Wide & Deep (Cheng et al. 2016) on raw 64-bit categorical ids by the hashing trick, with sparse gradients.

Data (made on the host as a data loader would, then copied): 24 categorical fields of raw int64 ids; fields
0-19 single-valued, fields 20-23 multi-hot bags of 1 to 8 ids with tf-idf-like weights. On the device every
id is hashed into its bucket ((id XOR field salt) * 0x2545F491 mod 2**24), all 24 fields into ONE shared
nn.EmbeddingBag(16,777,216, 32, mode="sum", sparse=True) (2.1 GB fp32) through one call with offsets and
per_sample_weights (1.0 for the single-valued fields), the (B * 24, 32) bags viewed as (B, 768).

Wide part: the 28 pairwise crosses of fields 0-7 hashed into nn.EmbeddingBag(16,777,216, 1, mode="sum",
sparse=True) over a (B, 28) 2-D input, plus a bias. Deep part: MLP 768-1024-512-256-1 (LayerNorm, ReLU).
Logit = wide + deep, BCEWithLogitsLoss.

Optimizers: torch.optim.Adagrad (lr 0.05) over the deep table's sparse gradients, torch.optim.SGD (lr 0.1)
over the wide table's, torch.optim.AdamW (lr 1e-3, default foreach) over the MLP; an exponential moving
average (decay 0.999) of the MLP's parameters kept with torch._foreach_lerp_. fp32, micro-batches of
16,384, each step accumulating 4 of them (the sparse gradients summed across micro-batches).

Phases: the first step; 3 more steps; evaluation under inference_mode with the EMA weights swapped in by
torch.func.functional_call, two batches of 65,536; then, after torch.cuda.empty_cache(), 3 steps of one
micro-batch of 32,768 with the model under bf16 autocast. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(20106)
if SMALL:
    BUCKETS, D, B, EVAL_B, BIG_B, ACCUM, STEPS = 2**12, 8, 64, 128, 128, 2, 1
    HID = [64, 32]
else:
    BUCKETS, D, B, EVAL_B, BIG_B, ACCUM, STEPS = 2**24, 32, 16384, 65536, 32768, 4, 3
    HID = [1024, 512, 256]
N_FIELDS, N_SINGLE, N_WIDE, MAX_BAG = 24, 20, 8, 8
CROSS_I, CROSS_J = torch.triu_indices(N_WIDE, N_WIDE, offset=1)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} B, reserved {torch.cuda.memory_reserved()} B")
        torch.cuda.reset_peak_memory_stats()


def hash_bucket(ids, salt):
    return ((ids ^ salt) * 0x2545F491) % BUCKETS


class WideDeep(nn.Module):
    def __init__(self):
        super().__init__()
        self.deep_emb = nn.EmbeddingBag(BUCKETS, D, mode="sum", sparse=True)
        self.wide_emb = nn.EmbeddingBag(BUCKETS, 1, mode="sum", sparse=True)
        nn.init.normal_(self.deep_emb.weight, std=0.01)
        nn.init.zeros_(self.wide_emb.weight)
        self.wide_bias = nn.Parameter(torch.zeros(1))
        layers, d = [], N_FIELDS * D
        for h in HID:
            layers += [nn.Linear(d, h), nn.LayerNorm(h), nn.ReLU()]
            d = h
        layers.append(nn.Linear(d, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, flat_ids, flat_field, offsets, weights, single):
        b = single.shape[0]
        buckets = hash_bucket(flat_ids, flat_field * 0x5BD1E995)
        deep = self.deep_emb(buckets, offsets, per_sample_weights=weights).view(b, N_FIELDS * D)
        crosses = single[:, CROSS_I] * 1_000_003 + single[:, CROSS_J]
        wide = self.wide_emb(hash_bucket(crosses, 0x27D4EB2F)).squeeze(1) + self.wide_bias
        return wide + self.mlp(deep).squeeze(1)


def host_batch(b):
    """Raw ids in field-major bag order per sample: (sample 0 field 0, sample 0 field 1, ...)."""
    single = torch.randint(0, 2**62, (b, N_SINGLE))
    lengths = torch.ones(b, N_FIELDS, dtype=torch.long)
    lengths[:, N_SINGLE:] = torch.randint(1, MAX_BAG + 1, (b, N_FIELDS - N_SINGLE))
    lengths = lengths.view(-1)
    total = int(lengths.sum())
    field = torch.arange(N_FIELDS).repeat(b).repeat_interleave(lengths)
    flat_ids = torch.randint(0, 2**62, (total,))
    is_single = field < N_SINGLE
    flat_ids[is_single] = single.view(-1)
    weights = torch.where(is_single, torch.ones(total), torch.rand(total) * 2)
    offsets = torch.zeros_like(lengths)
    offsets[1:] = lengths.cumsum(0)[:-1]
    labels = (torch.rand(b) < 0.2).float()
    return [
        t.to(device) for t in (flat_ids, field, offsets, weights, single[:, :N_WIDE].contiguous(), labels)
    ]


model = WideDeep().to(device)
print(f"wide & deep: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
mlp_params = [model.wide_bias, *list(model.mlp.parameters())]
opt_deep = torch.optim.Adagrad([model.deep_emb.weight], lr=0.05)
opt_wide = torch.optim.SGD([model.wide_emb.weight], lr=0.1)
opt_mlp = torch.optim.AdamW(mlp_params, lr=1e-3)
opts = [opt_deep, opt_wide, opt_mlp]
ema = {n: p.detach().clone() for n, p in model.named_parameters() if not n.endswith("_emb.weight")}
ema_live = [p for n, p in model.named_parameters() if n in ema]


def step(b, accum, autocast=False):
    for o in opts:
        o.zero_grad(set_to_none=True)
    total = 0.0
    for _ in range(accum):
        *x, y = host_batch(b)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and amp):
            logits = model(*x)
        loss = F.binary_cross_entropy_with_logits(logits.float(), y) / accum
        loss.backward()
        total += loss.item()
    for o in opts:
        o.step()
    with torch.no_grad():
        torch._foreach_lerp_(list(ema.values()), ema_live, 1 - 0.999)
    return total


model.train()
print(f"step 0 loss {step(B, ACCUM):.4f}")
report("first step")
for _ in range(STEPS):
    loss = step(B, ACCUM)
print(f"step {STEPS} loss {loss:.4f}")
report("train")

model.eval()
pos_mean = 0.0
with torch.inference_mode():
    for _ in range(2):
        *x, y = host_batch(EVAL_B)
        p = torch.sigmoid(functional_call(model, ema, tuple(x), strict=False))
        pos_mean += p[y > 0].mean().item() / 2
print(f"eval mean p(click) on positives {pos_mean:.4f}")
report("eval ema")

if device == "cuda":
    torch.cuda.empty_cache()
model.train()
for s in range(3):
    loss = step(BIG_B, 1, autocast=True)
    print(f"bf16 step {s} loss {loss:.4f}")
if device == "cuda":
    print(f"allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
