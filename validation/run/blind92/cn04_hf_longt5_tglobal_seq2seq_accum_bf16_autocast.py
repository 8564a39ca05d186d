"""HF transformers LongT5 with transient-global encoder attention (local radius 127, global blocks of
16) built from a config at 6+6 layers, 512 wide, 8 heads, vocabulary 32,128, fp32 weights trained
under bf16 autocast with AdamW, gradient accumulation over 2 micro-batches of 2 x (2,048 source,
256 target) tokens with -100 padded labels, 3 optimizer steps, then an eval forward under no_grad;
5 phases."""

import os

import torch
from transformers import LongT5Config, LongT5ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9204)
if SMALL:
    cfg = LongT5Config(
        vocab_size=128,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        local_radius=4,
        global_block_size=4,
    )
    B, S, T = 2, 32, 8
else:
    cfg = LongT5Config(
        vocab_size=32128,
        d_model=512,
        d_kv=64,
        d_ff=2048,
        num_layers=6,
        num_heads=8,
        local_radius=127,
        global_block_size=16,
    )
    B, S, T = 2, 2048, 256
cfg.encoder_attention_type = "transient-global"
cfg.decoder_start_token_id = 0
ACCUM = 2
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LongT5ForConditionalGeneration(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    for _micro in range(ACCUM):
        src = torch.randint(2, cfg.vocab_size, (B, S), device=device)
        tgt = torch.randint(2, cfg.vocab_size, (B, T), device=device)
        tgt[:, T - T // 4 :] = -100
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=src, labels=tgt).loss / ACCUM
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del src, tgt, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    src = torch.randint(2, cfg.vocab_size, (B, S), device=device)
    dec = torch.zeros(B, T, dtype=torch.long, device=device)
    logits = model(input_ids=src, decoder_input_ids=dec).logits
if device == "cuda":
    print(
        f"eval {tuple(logits.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
