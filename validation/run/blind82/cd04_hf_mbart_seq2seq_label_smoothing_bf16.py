"""HF MBartForConditionalGeneration (pre-norm encoder-decoder with a final layer norm per stack, a
250,027 vocabulary tied to the LM head) built from its config, 6+6 layers, 768 wide, fp32 weights
trained under bf16 autocast, the labels' padding set to -100 and a label-smoothed (0.1)
cross-entropy computed from the logits outside the model, AdamW, batch 8 of 256 source and 128
target tokens, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import MBartConfig, MBartForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8204)
if SMALL:
    config = MBartConfig(
        vocab_size=128,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
    )
    B, S, T = 2, 16, 8
else:
    config = MBartConfig(
        vocab_size=250027,
        d_model=768,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=12,
        decoder_attention_heads=12,
        encoder_ffn_dim=3072,
        decoder_ffn_dim=3072,
        max_position_embeddings=1024,
    )
    B, S, T = 8, 256, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MBartForConditionalGeneration(config).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01)
pad = config.pad_token_id
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    src = torch.randint(4, config.vocab_size, (B, S), device=device)
    src_len = torch.randint(S // 2, S + 1, (B,), device=device)
    src_mask = torch.arange(S, device=device)[None, :] < src_len[:, None]
    src = src.masked_fill(~src_mask, pad)
    tgt = torch.randint(4, config.vocab_size, (B, T), device=device)
    tgt_len = torch.randint(T // 2, T + 1, (B,), device=device)
    tgt = tgt.masked_fill(torch.arange(T, device=device)[None, :] >= tgt_len[:, None], pad)
    labels = tgt.masked_fill(tgt == pad, -100)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(input_ids=src, attention_mask=src_mask.long(), labels=labels).logits
    loss = F.cross_entropy(logits.float().view(-1, config.vocab_size), labels.view(-1), label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del src, src_len, src_mask, tgt, tgt_len, labels, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
