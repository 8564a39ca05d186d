"""HF transformers ProphetNet (future n-gram prediction: a main stream and 2 predicting streams in the
decoder's n-gram self-attention, relative position buckets, label-smoothed n-gram loss) built from a
config at 6+6 layers, 512 wide, 8 heads, FFN 2,048, vocabulary 30,522, fp32 with AdamW, batch 8 x
(512 source, 128 target) tokens, 3 steps, then an eval forward under no_grad; 5 phases."""

import os

import torch
from transformers import ProphetNetConfig, ProphetNetForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9301)
if SMALL:
    cfg = ProphetNetConfig(
        vocab_size=128,
        hidden_size=32,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_encoder_layers=2,
        num_decoder_layers=2,
        num_encoder_attention_heads=4,
        num_decoder_attention_heads=4,
    )
    B, S, T = 2, 16, 8
else:
    cfg = ProphetNetConfig(
        vocab_size=30522,
        hidden_size=512,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        num_encoder_layers=6,
        num_decoder_layers=6,
        num_encoder_attention_heads=8,
        num_decoder_attention_heads=8,
    )
    B, S, T = 8, 512, 128
cfg.eps = 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ProphetNetForConditionalGeneration(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    src = torch.randint(3, cfg.vocab_size, (B, S), device=device)
    tgt = torch.randint(3, cfg.vocab_size, (B, T), device=device)
    out = model(input_ids=src, attention_mask=torch.ones_like(src), labels=tgt)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del src, tgt, out
model.eval()
with torch.no_grad():
    src = torch.randint(3, cfg.vocab_size, (B, S), device=device)
    dec = torch.randint(3, cfg.vocab_size, (B, T), device=device)
    logits = model(input_ids=src, decoder_input_ids=dec).logits
if device == "cuda":
    print(
        f"eval {tuple(logits.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
