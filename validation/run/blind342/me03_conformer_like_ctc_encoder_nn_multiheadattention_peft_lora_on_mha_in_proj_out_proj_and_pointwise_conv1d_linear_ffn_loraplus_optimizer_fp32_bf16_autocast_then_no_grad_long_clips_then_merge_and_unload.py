"""peft LoRA on a hand-written speech encoder built from torch.nn modules: a Conformer-like CTC model
(Conv1d x2 stride-2 subsampling of 80-bin features, 12 blocks at 512 of half-step Linear FFNs,
`nn.MultiheadAttention` (batch_first, 8 heads) and a convolution module of pointwise Conv1d + GLU,
depthwise Conv1d (kernel 31), pointwise Conv1d, 256-token CTC head). Pretrained-style frozen fp32
weights; LoRA (r 16, alpha 32) on every `nn.MultiheadAttention` (peft's MultiheadAttention layer, which
merges the in_proj/out_proj deltas into the weights for each forward and unmerges after), on the pointwise
Conv1d layers and the FFN Linears, the CTC head trained in full through `modules_to_save`. LoRA+ param
groups from `peft.optimizers.create_loraplus_optimizer` (B matrices at 16x the learning rate), bf16
autocast, `F.ctc_loss` on padded clips, 3 steps at 24 x 1600 frames. Then no_grad decoding of 8 long clips
(6000 frames) with the adapters on, then `merge_and_unload()` and the same clips again.

Phases: 0 model and adapters built; 1 first step; 2 two more steps; 3 adapter eval on long clips;
4 merged eval."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from peft.optimizers import create_loraplus_optimizer

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3423)
if SMALL:
    D, LAYERS, HEADS, B, T, LONG_B, LONG_T, U = 64, 2, 4, 2, 160, 2, 320, 12
else:
    D, LAYERS, HEADS, B, T, LONG_B, LONG_T, U = 512, 12, 8, 24, 1600, 8, 6000, 120
MELS, VOCAB = 80, 256
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.ff1 = nn.Linear(D, 4 * D)
        self.ff2 = nn.Linear(4 * D, D)

    def forward(self, x):
        return self.ff2(F.dropout(F.silu(self.ff1(self.norm(x))), 0.1, self.training))


class ConvModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.pw1 = nn.Conv1d(D, 2 * D, 1)
        self.dw = nn.Conv1d(D, D, 31, padding=15, groups=D)
        self.bn = nn.BatchNorm1d(D)
        self.pw2 = nn.Conv1d(D, D, 1)

    def forward(self, x):
        y = self.norm(x).transpose(1, 2)
        y = F.glu(self.pw1(y), dim=1)
        y = self.pw2(F.silu(self.bn(self.dw(y))))
        return y.transpose(1, 2)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ffa = FeedForward()
        self.attn_norm = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, HEADS, dropout=0.1, batch_first=True)
        self.conv = ConvModule()
        self.ffb = FeedForward()
        self.out_norm = nn.LayerNorm(D)

    def forward(self, x, pad):
        x = x + 0.5 * self.ffa(x)
        h = self.attn_norm(x)
        x = x + self.attn(h, h, h, key_padding_mask=pad, need_weights=False)[0]
        x = x + self.conv(x)
        x = x + 0.5 * self.ffb(x)
        return self.out_norm(x)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub1 = nn.Conv1d(MELS, D, 3, stride=2, padding=1)
        self.sub2 = nn.Conv1d(D, D, 3, stride=2, padding=1)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(D, VOCAB)

    def forward(self, feats, lengths):
        x = F.gelu(self.sub2(F.gelu(self.sub1(feats.transpose(1, 2))))).transpose(1, 2)
        out_len = (lengths + 3) // 4
        pad = torch.arange(x.shape[1], device=x.device)[None, :] >= out_len[:, None]
        for block in self.blocks:
            x = block(x, pad)
        return self.head(x).log_softmax(-1), out_len


encoder = Encoder().to(device)
config = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["attn", "pw1", "pw2", "ff1", "ff2"],
    modules_to_save=["head"],
)
model = get_peft_model(encoder, config)
model.print_trainable_parameters()
optimizer = create_loraplus_optimizer(
    model=model, optimizer_cls=torch.optim.AdamW, lr=5e-4, loraplus_lr_ratio=16, weight_decay=0.01
)
report("built")


def clips(n, t):
    lengths = torch.linspace(t // 2, t, n).long()
    feats = torch.randn(n, t, MELS)
    feats = feats * (torch.arange(t)[None, :, None] < lengths[:, None, None])
    return feats.to(device), lengths.to(device)


model.train()
for step in range(3):
    feats, lengths = clips(B, T)
    targets = torch.randint(1, VOCAB, (B, U), device=device)
    target_lengths = torch.linspace(U // 2, U, B).long().to(device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logp, out_len = model(feats, lengths)
    loss = F.ctc_loss(logp.float().transpose(0, 1), targets, out_len, target_lengths, zero_infinity=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 5.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} ctc {loss.item():.3f}")
    del logp, loss
    if step == 0:
        report("step0")
report("steps1-2")

model.eval()
feats, lengths = clips(LONG_B, LONG_T)
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    logp, out_len = model(feats, lengths)
    hyp = logp.argmax(-1)
print("adapter blanks", (hyp == 0).sum().item())
del logp, hyp
report("adapter eval")

del optimizer
merged = model.merge_and_unload()
del model
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    logp, out_len = merged(feats, lengths)
    hyp = logp.argmax(-1)
print("merged blanks", (hyp == 0).sum().item())
report("merged eval")
