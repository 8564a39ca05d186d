"""HF Pix2Struct-base built from its config (a 12-layer ViT over up to 2,048 variable-resolution
16 x 16 patches given as flattened patches with their row and column ids, a 12-layer T5-style decoder
with cross attention over a 50,244 vocabulary), trained for screenshot parsing with its weights in
bf16 and transformers' Adafactor (fixed lr 1e-4, no relative step, no parameter scaling): batch 8 of
2,048 patches (the last 25% padding) and 128 target tokens padded with -100, 3 steps; then greedy
generate of 48 new tokens with the KV cache for 8 pages under no_grad, then for 16; 5 phases."""

import os

import torch
from transformers import Pix2StructConfig, Pix2StructForConditionalGeneration
from transformers.optimization import Adafactor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12203)
B, PATCHES, T, NEW = (2, 128, 16, 6) if SMALL else (8, 2048, 128, 48)
device = "cuda" if torch.cuda.is_available() else "cpu"

layers = 2 if SMALL else 12
config = Pix2StructConfig(
    text_config={"num_layers": layers, "hidden_size": 768, "d_ff": 2048, "use_cache": True},
    vision_config={"num_hidden_layers": layers, "hidden_size": 768, "seq_len": 4096},
)
model = Pix2StructForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
opt = Adafactor(model.parameters(), lr=1e-4, relative_step=False, scale_parameter=False, warmup_init=False)


def pages(n):
    rows = torch.arange(PATCHES, device=device) // 64 + 1
    cols = torch.arange(PATCHES, device=device) % 64 + 1
    ids = torch.stack([rows, cols], -1).float().expand(n, -1, -1)
    pix = torch.randn(n, PATCHES, 16 * 16 * 3, device=device)
    flattened = torch.cat([ids, pix], -1)
    mask = torch.ones(n, PATCHES, device=device)
    mask[:, PATCHES * 3 // 4 :] = 0
    flattened = flattened * mask.unsqueeze(-1)
    return flattened.to(torch.bfloat16), mask


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    flattened, mask = pages(B)
    labels = torch.randint(2, config.text_config.vocab_size, (B, T), device=device)
    labels[:, T - T // 4 :] = -100
    out = model(flattened_patches=flattened, attention_mask=mask, labels=labels)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del flattened, mask, labels, out

model.eval()
for n in (B, 2 * B):
    flattened, mask = pages(n)
    with torch.no_grad():
        seq = model.generate(
            flattened_patches=flattened,
            attention_mask=mask,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
        )
    if device == "cuda":
        print(
            f"generate {n} -> {tuple(seq.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del flattened, mask, seq
