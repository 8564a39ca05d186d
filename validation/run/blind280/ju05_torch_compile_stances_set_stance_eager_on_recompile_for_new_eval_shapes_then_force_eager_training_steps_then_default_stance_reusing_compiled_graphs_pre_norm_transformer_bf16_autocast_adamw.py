"""`torch.compiler.set_stance`, PyTorch's switch for what a compiled model does when it would compile
again, used the way its tutorial suggests: a pre-norm transformer encoder (6 layers, d_model 768,
12 heads, GELU MLP 3072, learned positions, mean-pooled 100-way head) is wrapped in `torch.compile`
(Inductor, default mode) and trained at batch 64 x 256 tokens with bf16 autocast and AdamW (the
optimizer step eager). Evaluation then runs under `set_stance("eager_on_recompile")`: its shapes
(batch 96 x 320 tokens) and no_grad/eval mode fail the compiled graph's guards, so instead of a
recompilation the calls run eagerly; then a debugging stretch under `set_stance("force_eager")` takes
two training steps at the training shape in eager mode although a compiled graph exists; finally the
default stance takes one more step through the cached compiled graph. Phase 1: model and optimizer.
Phase 2: 3 compiled training steps. Phase 3: eval under eager_on_recompile (3 batches). Phase 4: 2
force_eager training steps. Phase 5: 1 compiled step in the default stance. Seeded; no value-dependent
sizes."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2805)
dev = "cuda"
D, H, L, FF, VOCAB, CLASSES, MAXLEN = 768, 12, 6, 3072, 16384, 100, 512


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.n2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, FF)
        self.fc2 = nn.Linear(FF, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.zeros(MAXLEN, D))
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x).mean(1))


model = Encoder().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
compiled = torch.compile(model)
report("model")


def train_step(b, t):
    idx = torch.randint(0, VOCAB, (b, t), device=dev)
    y = torch.randint(0, CLASSES, (b,), device=dev)
    with torch.autocast("cuda", torch.bfloat16):
        loss = F.cross_entropy(compiled(idx).float(), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


for step in range(3):
    print(f"compiled step {step} loss {train_step(64, 256):.3f}")
report("compiled train")

model.eval()
with torch.compiler.set_stance("eager_on_recompile"), torch.no_grad():
    for i in range(3):
        idx = torch.randint(0, VOCAB, (96, 320), device=dev)
        with torch.autocast("cuda", torch.bfloat16):
            pred = compiled(idx).argmax(-1)
        print(f"eval batch {i} first predictions {pred[:4].tolist()}")
model.train()
report("eval eager_on_recompile")

with torch.compiler.set_stance("force_eager"):
    for step in range(2):
        print(f"force_eager step {step} loss {train_step(64, 256):.3f}")
report("force_eager train")

print(f"default stance step loss {train_step(64, 256):.3f}")
report("end")
