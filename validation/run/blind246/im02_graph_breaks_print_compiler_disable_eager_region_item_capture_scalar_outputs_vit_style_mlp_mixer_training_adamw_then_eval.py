"""Graph breaks in a compiled model: an MLP-Mixer-style image classifier (16 x 16 patches of 256 x 256
images embedded by a Linear, 256 tokens, d 512, 8 blocks of token- and channel-mixing MLPs, 1000 classes)
compiled whole, whose forward has a `print` in it (dynamo breaks the graph there), a
`torch.compiler.disable` region (an eager "feature statistics" function that builds a temporary of the
activations) and a `.item()` read with `torch._dynamo.config.capture_scalar_outputs = True` whose value
is used only as a multiplier (an unbacked float, not a size). fp32 weights, AdamW (foreach), batch 64,
three steps; then evaluation under no_grad at batch 128; then two steps under bf16 autocast (new graphs
for the autocast state).

No value-dependent sizes. 4 phases.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2462)
torch._dynamo.config.capture_scalar_outputs = True
D, P, N, L, C = 512, 16, 256, 8, 1000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


@torch.compiler.disable
def feature_stats(h):
    # eager region: a temporary the size of the activations, reduced to a per-channel scale
    centered = h - h.mean(dim=(0, 1), keepdim=True)
    return torch.rsqrt(centered.pow(2).mean(dim=(0, 1)) + 1.0)


class MixerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.tok1, self.tok2 = nn.Linear(N, 256), nn.Linear(256, N)
        self.ch1, self.ch2 = nn.Linear(D, 2048), nn.Linear(2048, D)

    def forward(self, x):
        y = self.n1(x).transpose(1, 2)
        x = x + self.tok2(F.gelu(self.tok1(y))).transpose(1, 2)
        return x + self.ch2(F.gelu(self.ch1(self.n2(x))))


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(3 * P * P, D)  # patch embedding as a Linear over flattened patches
        self.blocks = nn.ModuleList(MixerBlock() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, C)

    def forward(self, img):
        b, g = img.shape[0], img.shape[-1] // P
        patches = img.view(b, 3, g, P, g, P).permute(0, 2, 4, 1, 3, 5).reshape(b, g * g, 3 * P * P)
        x = self.stem(patches)
        for i, blk in enumerate(self.blocks):
            x = blk(x)
            if i == 3:
                print("mixer: halfway")  # graph break
                x = x * feature_stats(x.detach())  # eager region
        scale = x.detach().abs().mean().item()  # captured as an unbacked float
        x = self.norm(x) * (1.0 / (1.0 + scale))
        return self.head(x.mean(dim=1))


model = Mixer().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
compiled = torch.compile(model)
report("setup")

for _ in range(3):
    img = torch.randn(64, 3, 256, 256, device="cuda")
    lbl = torch.randint(0, C, (64,), device="cuda")
    loss = F.cross_entropy(compiled(img), lbl)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
report("train_fp32_graph_breaks_three_steps")

model.eval()
with torch.no_grad():
    logits = compiled(torch.randn(128, 3, 256, 256, device="cuda"))
    del logits
report("eval_no_grad_batch128")

model.train()
for _ in range(2):
    img = torch.randn(64, 3, 256, 256, device="cuda")
    lbl = torch.randint(0, C, (64,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(compiled(img), lbl)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
report("train_bf16_autocast_two_steps")
