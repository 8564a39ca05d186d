"""A CLIP-style dual encoder written by hand (image tower: 16x16 patches unfolded and projected by a
Linear, class token, 6 pre-LN transformer layers 512 wide; text tower: token embeddings, 6 causal
layers 512 wide, pooled at the last token) whose two towers run concurrently, each on its own side
stream (`with torch.cuda.stream(s)`, after `s.wait_stream(main)`), joined on the main stream with
`wait_stream` for the symmetric InfoNCE loss; backward then runs each tower's nodes on the stream its
forward used (autograd's stream semantics). The process is capped at 16 GiB with
`torch.cuda.set_per_process_memory_fraction(16 GiB / total)`, and the allocator is configured before
torch is imported with
`PYTORCH_CUDA_ALLOC_CONF="garbage_collection_threshold:0.6,roundup_power2_divisions:[128:2,512:4,>:8]"`.
A batch finder doubles the batch from 64, catching `torch.OutOfMemoryError` (`empty_cache()` after
the miss), then trains three steps at the largest batch that fit; then a no_grad retrieval
evaluation embeds four batches on the two streams and scores them against each other.

Phases: 0 model and optimizer built; 1 OOM-catching batch finder; 2 three training steps at the
found batch; 3 no_grad retrieval evaluation."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = (
    "garbage_collection_threshold:0.6,roundup_power2_divisions:[128:2,512:4,>:8]"
)

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3265)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    D, H, L, IMG, V, T, START, LIMIT = 64, 4, 2, 32, 512, 16, 4, 16
else:
    D, H, L, IMG, V, T, START, LIMIT = 512, 8, 6, 224, 49408, 77, 64, 4096
P = 16
NP = (IMG // P) ** 2


class Layer(nn.Module):
    def __init__(self, causal):
        super().__init__()
        self.causal = causal
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class ImageTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Linear(3 * P * P, D)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(NP + 1, D) * 0.02)
        self.layers = nn.ModuleList(Layer(False) for _ in range(L))
        self.ln, self.proj = nn.LayerNorm(D), nn.Linear(D, D, bias=False)

    def forward(self, img):
        patches = F.unfold(img, P, stride=P).transpose(1, 2)
        x = torch.cat([self.cls.expand(img.shape[0], -1, -1), self.patch(patches)], 1) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.proj(self.ln(x[:, 0]))


class TextTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(T, D) * 0.02)
        self.layers = nn.ModuleList(Layer(True) for _ in range(L))
        self.ln, self.proj = nn.LayerNorm(D), nn.Linear(D, D, bias=False)

    def forward(self, ids):
        x = self.emb(ids) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.proj(self.ln(x[:, -1]))


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


image_tower, text_tower = ImageTower().to(device), TextTower().to(device)
logit_scale = nn.Parameter(torch.tensor(2.659, device=device))
params = [*image_tower.parameters(), *text_tower.parameters(), logit_scale]
opt = torch.optim.AdamW(params, lr=5e-4, weight_decay=0.2)
if device == "cuda":
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(16 * 2**30 / total)
    s_img, s_txt = torch.cuda.Stream(), torch.cuda.Stream()


def on(stream):
    return torch.cuda.stream(stream) if device == "cuda" else contextlib.nullcontext()


def encode(img, ids):
    if device == "cuda":
        main = torch.cuda.current_stream()
        s_img.wait_stream(main)
        s_txt.wait_stream(main)
    with on(s_img if device == "cuda" else None), torch.autocast(device, dtype=torch.bfloat16):
        zi = F.normalize(image_tower(img).float(), dim=-1)
    with on(s_txt if device == "cuda" else None), torch.autocast(device, dtype=torch.bfloat16):
        zt = F.normalize(text_tower(ids).float(), dim=-1)
    if device == "cuda":
        main.wait_stream(s_img)
        main.wait_stream(s_txt)
    return zi, zt


def train_step(batch):
    img = torch.randn(batch, 3, IMG, IMG, device=device)
    ids = torch.randint(0, V, (batch, T), device=device)
    zi, zt = encode(img, ids)
    logits = logit_scale.exp() * zi @ zt.t()
    target = torch.arange(batch, device=device)
    loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target)) / 2
    loss.backward()
    return loss


report("phase0 setup")

fit, batch = None, START
while batch <= LIMIT:
    try:
        train_step(batch)
        opt.zero_grad(set_to_none=True)
        fit = batch
        print("fits", batch)
        batch *= 2
    except torch.OutOfMemoryError:
        print("oom at", batch)
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.empty_cache()
        break
print("batch", fit)
report("phase1 batch finder")

for step in range(3):
    loss = train_step(fit)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("step", step, loss.item())
del loss
report("phase2 train")

with torch.no_grad():
    bank_i, bank_t = [], []
    for _ in range(4):
        zi, zt = encode(
            torch.randn(fit, 3, IMG, IMG, device=device), torch.randint(0, V, (fit, T), device=device)
        )
        bank_i.append(zi)
        bank_t.append(zt)
    sims = torch.cat(bank_i) @ torch.cat(bank_t).t()
    print("recall@1", (sims.argmax(1) == torch.arange(sims.shape[0], device=device)).float().mean().item())
report("phase3 eval")
