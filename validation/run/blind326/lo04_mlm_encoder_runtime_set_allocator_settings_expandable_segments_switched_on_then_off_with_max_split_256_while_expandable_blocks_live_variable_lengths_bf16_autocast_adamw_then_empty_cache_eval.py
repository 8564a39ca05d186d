"""A masked-language-model encoder (`nn.TransformerEncoder`, norm_first, GELU, 12 layers, 768 wide,
batch_first, key padding masks) trained on token-budget batches of varying length while the
allocator is reconfigured at run time with `torch.cuda.memory._set_allocator_settings`, as a user
chasing fragmentation does: the first steps run under the default settings, then
`_set_allocator_settings("expandable_segments:True")` for steps on another set of lengths, then
`_set_allocator_settings("expandable_segments:False,max_split_size_mb:256")` while tensors that live
in expandable segments (gradients, optimizer state created there) are still alive, for steps on a
third set of lengths; finally `torch.cuda.empty_cache()` and a no_grad evaluation. Only masked
positions are scored (logits gathered with a boolean index before the vocabulary projection);
fp32 weights, bf16 autocast, AdamW (foreach).

Phases: 0 model built; 1 four steps, default settings; 2 four steps with expandable segments on;
3 four steps with them off and max_split_size_mb 256; 4 empty_cache, no_grad evaluation."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3264)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    V, D, H, L, TOKENS = 512, 64, 4, 2, 256
    LENGTHS = [[32, 16], [64, 8], [48, 24], [40, 56]]
else:
    V, D, H, L, TOKENS = 30522, 768, 12, 12, 16384
    LENGTHS = [[512, 128, 384, 256], [448, 96, 320, 512], [200, 512, 160, 288], [512, 256, 384, 128]]
MASK_ID, PAD_ID = 3, 0


class MLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D, padding_idx=PAD_ID)
        self.pos = nn.Embedding(512, D)
        layer = nn.TransformerEncoderLayer(
            D, H, 4 * D, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.transform = nn.Linear(D, D)
        self.decoder = nn.Linear(D, V)
        self.decoder.weight = self.emb.weight

    def forward(self, ids, pad_mask, masked):
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        x = self.norm(self.encoder(x, src_key_padding_mask=pad_mask))
        return self.decoder(F.gelu(self.transform(x[masked])))


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def make_batch(length):
    b = TOKENS // length
    ids = torch.randint(5, V, (b, length), device=device)
    keep = torch.arange(length, device=device) < torch.randint(length // 2, length + 1, (b, 1), device=device)
    ids = ids.masked_fill(~keep, PAD_ID)
    masked = (torch.rand(b, length, device=device) < 0.15) & keep
    labels = ids[masked]
    ids = ids.masked_fill(masked, MASK_ID)
    return ids, ~keep, masked, labels


def step(length):
    ids, pad_mask, masked, labels = make_batch(length)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(ids, pad_mask, masked)
    loss = F.cross_entropy(logits.float(), labels)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model = MLM().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
report("phase0 model")

for length in LENGTHS[0]:
    print("default", length, step(length))
report("phase1 default")

if device == "cuda":
    torch.cuda.memory._set_allocator_settings("expandable_segments:True")
for length in LENGTHS[1]:
    print("expandable", length, step(length))
report("phase2 expandable")

if device == "cuda":
    torch.cuda.memory._set_allocator_settings("expandable_segments:False,max_split_size_mb:256")
for length in LENGTHS[2]:
    print("max_split", length, step(length))
report("phase3 max_split")

if device == "cuda":
    torch.cuda.empty_cache()
model.eval()
with torch.no_grad():
    for length in LENGTHS[3]:
        ids, pad_mask, masked, labels = make_batch(length)
        with torch.autocast(device, dtype=torch.bfloat16):
            logits = model(ids, pad_mask, masked)
        print("eval", length, F.cross_entropy(logits.float(), labels).item())
        del logits
report("phase4 eval")
