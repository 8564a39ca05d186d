"""HF transformers HuBERT-Large-style CTC recogniser (stable layer norm, layer-normed conv feature
encoder, 24 layers, 1,024 wide, 16 heads, 32-letter vocabulary) built from its config in bf16;
greedy CTC decoding under torch.inference_mode of a batch of 8 waveforms of 4 to 12 s at 16 kHz
zero-padded with an attention mask, then a batch of 4 of 20 to 30 s; 3 phases."""

import os

import torch
from transformers import HubertConfig, HubertForCTC

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9402)
if SMALL:
    cfg = HubertConfig(
        vocab_size=32,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        conv_dim=(16, 16, 16),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 2),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        feat_extract_norm="layer",
        do_stable_layer_norm=True,
    )
    RUNS = ((2, 800, 1600), (2, 1600, 2400))
else:
    cfg = HubertConfig(
        vocab_size=32,
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
        feat_extract_norm="layer",
        do_stable_layer_norm=True,
        conv_bias=True,
    )
    RUNS = ((8, 64000, 192000), (4, 320000, 480000))
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = HubertForCTC(cfg).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for B, lo, hi in RUNS:
    lengths = torch.linspace(lo, hi, B).long()
    wave = torch.zeros(B, hi, device=device, dtype=dtype)
    mask = torch.zeros(B, hi, device=device, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        wave[i, :n] = torch.randn(n, device=device, dtype=dtype)
        mask[i, :n] = 1
    with torch.inference_mode():
        logits = model(wave, attention_mask=mask).logits
        pred = logits.argmax(-1)
        keep = torch.ones_like(pred, dtype=torch.bool)
        keep[:, 1:] = pred[:, 1:] != pred[:, :-1]
        keep &= pred != cfg.pad_token_id
        n_chars = keep.sum(-1)
    if device == "cuda":
        print(
            f"batch {B} logits {tuple(logits.shape)} chars {n_chars.tolist()}"
            f" peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del wave, mask, logits, pred, keep, n_chars
