"""Long-document summarization serving with HF transformers PEGASUS-X (staggered block-local
encoder attention with 32 global tokens), built from a config at 12 + 12 layers, 768 wide, 12
heads, a 96,103 vocabulary, fp16 weights, under torch.inference_mode: beam search with 4 beams and
a length penalty over 2 documents of 4,096 tokens (host-padded: the second 3,000 tokens long, its
attention mask built on the host), 48 new tokens; then greedy decoding of 6 documents of 1,024
tokens; 2 phases."""

import os

import torch
from transformers import PegasusXConfig, PegasusXForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10501)
if SMALL:
    cfg = PegasusXConfig(
        vocab_size=200,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_global_tokens=4,
        block_size=16,
        max_position_embeddings=1024,
    )
    LONG, SHORT_LEN, NEW, B2, LONG2 = 128, 64, 6, 3, 96
else:
    cfg = PegasusXConfig(
        d_model=768,
        encoder_layers=12,
        decoder_layers=12,
        encoder_attention_heads=12,
        decoder_attention_heads=12,
        encoder_ffn_dim=3072,
        decoder_ffn_dim=3072,
        max_position_embeddings=16384,
    )
    LONG, SHORT_LEN, NEW, B2, LONG2 = 4096, 1024, 48, 6, 3000
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = PegasusXForConditionalGeneration(cfg).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    ids = torch.randint(2, cfg.vocab_size, (2, LONG))
    mask = torch.ones(2, LONG, dtype=torch.long)
    ids[1, LONG2:] = cfg.pad_token_id
    mask[1, LONG2:] = 0
    out = model.generate(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        num_beams=4,
        length_penalty=0.8,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
    if device == "cuda":
        print(
            f"beam {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, mask, out
    ids = torch.randint(2, cfg.vocab_size, (B2, SHORT_LEN), device=device)
    out = model.generate(input_ids=ids, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    if device == "cuda":
        print(
            f"greedy {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
