"""A BART-base from BartConfig (768 wide, 6 + 6 layers, vocabulary 50,265, fp32 weights) trained on
batches of 16 whose source (128 to 768 tokens) and target (64 to 192) lengths change every step, with
the allocator configured before torch is imported (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,
roundup_power2_divisions:[256:1,512:2,1024:4,>:8]); fp16 autocast, GradScaler and Adam; one epoch of
4 steps with zero_grad(set_to_none=False) (the gradients kept and zeroed), one of 4 steps with
set_to_none=True and torch.cuda.empty_cache() after every step; then a 3-beam generate of 32 tokens
for 8 sources under inference_mode; 4 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = (
    "expandable_segments:True,roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"
)

import torch
from transformers import BartConfig, BartForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12806)
if SMALL:
    cfg = BartConfig(
        vocab_size=512,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_position_embeddings=256,
    )
    B, SRC, TGT = 2, (16, 64), (8, 32)
else:
    cfg = BartConfig(
        vocab_size=50265,
        d_model=768,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=12,
        decoder_attention_heads=12,
        encoder_ffn_dim=3072,
        decoder_ffn_dim=3072,
        max_position_embeddings=1024,
    )
    B, SRC, TGT = 16, (128, 768), (64, 192)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BartForConditionalGeneration(cfg).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler(device)


def step(set_to_none):
    s = int(torch.randint(SRC[0], SRC[1] + 1, ()).item())
    t = int(torch.randint(TGT[0], TGT[1] + 1, ()).item())
    src = torch.randint(4, cfg.vocab_size, (B, s), device=device)
    tgt = torch.randint(4, cfg.vocab_size, (B, t), device=device)
    with torch.autocast(device, dtype=torch.float16):
        loss = model(input_ids=src, labels=tgt).loss
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=set_to_none)
    return s, t, loss.item()


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for epoch, set_to_none in enumerate((False, True)):
    for _ in range(4):
        s, t, loss = step(set_to_none)
        if set_to_none and device == "cuda":
            torch.cuda.empty_cache()
        print(f"epoch {epoch} src {s} tgt {t} loss {loss:.3f}")
    if device == "cuda":
        print(
            f"epoch {epoch} allocated {torch.cuda.memory_allocated()}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16):
    src = torch.randint(4, cfg.vocab_size, (8, SRC[1]), device=device)
    out = model.generate(
        input_ids=src, num_beams=3, max_new_tokens=32, min_new_tokens=32, early_stopping=False
    )
if device == "cuda":
    print(
        f"generate {tuple(out.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke generate {tuple(out.shape)}")
