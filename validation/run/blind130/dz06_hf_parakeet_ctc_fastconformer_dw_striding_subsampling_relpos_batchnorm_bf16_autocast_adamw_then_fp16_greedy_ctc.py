"""A Parakeet CTC speech recognizer (FastConformer) from ParakeetCTCConfig: an encoder of 12 conformer
layers (512 wide, 8 heads with relative positional attention, macaron feed-forwards of 2,048, a
depthwise convolution module of kernel 9 with BatchNorm1d), 8x depthwise-striding Conv2d subsampling
of 80 mel bins with 256 channels, a 1x1 Conv1d CTC head over 1,025 tokens (blank 1,024). Trained
on 16 utterances of up to 1,600 frames (random lengths, a padding mask, host-made transcripts of
40 to 120 tokens padded with the blank id): bf16 autocast, CTC loss (cuDNN off, as the model says)
in fp32, AdamW with a OneCycle schedule, gradient clipping, 3 steps; then the model cast to fp16 and
CTC greedy decoding of 32 utterances of 3,000 frames through model.generate; 4 phases."""

import os

import torch
from transformers import ParakeetCTCConfig, ParakeetEncoderConfig, ParakeetForCTC

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13006)
if SMALL:
    enc = ParakeetEncoderConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        subsampling_conv_channels=16,
        layerdrop=0.0,
    )
    B, T, LMIN, LMAX, EB, ET = 2, 160, 4, 8, 2, 200
else:
    enc = ParakeetEncoderConfig(
        hidden_size=512,
        num_hidden_layers=12,
        num_attention_heads=8,
        intermediate_size=2048,
        subsampling_conv_channels=256,
        num_mel_bins=80,
        conv_kernel_size=9,
        layerdrop=0.0,
    )
    B, T, LMIN, LMAX, EB, ET = 16, 1600, 40, 120, 32, 3000
cfg = ParakeetCTCConfig(vocab_size=1025, encoder_config=enc.to_dict())
device = "cuda" if torch.cuda.is_available() else "cpu"

model = ParakeetForCTC(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-3, betas=(0.9, 0.98))
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3, total_steps=100, pct_start=0.1)
blank = cfg.pad_token_id


def batch():
    lengths = torch.randint(T // 2, T + 1, (B,))
    lengths[0] = T
    feats = torch.randn(B, T, enc.num_mel_bins, device=device)
    mask = (torch.arange(T)[None] < lengths[:, None]).long().to(device)
    label_lengths = torch.randint(LMIN, LMAX + 1, (B,))
    labels = torch.full((B, LMAX), blank, dtype=torch.long)
    for i, n in enumerate(label_lengths.tolist()):
        labels[i, :n] = torch.randint(0, blank, (n,))
    return feats, mask, labels.to(device)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    feats, mask, labels = batch()
    with torch.autocast(device, dtype=torch.bfloat16):
        out = model(input_features=feats, attention_mask=mask, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del feats, mask, labels, out

model = model.half().eval()
feats = torch.randn(EB, ET, enc.num_mel_bins, device=device, dtype=torch.float16)
mask = torch.ones(EB, ET, dtype=torch.long, device=device)
with torch.no_grad():
    tokens = model.generate(input_features=feats, attention_mask=mask)
seqs = tokens.sequences if hasattr(tokens, "sequences") else tokens
if device == "cuda":
    print(
        f"decoded {tuple(seqs.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke decoded {tuple(seqs.shape)}")
