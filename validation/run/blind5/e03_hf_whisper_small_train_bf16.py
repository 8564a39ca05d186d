"""HF WhisperForConditionalGeneration from a whisper-small-sized WhisperConfig (768 wide, 12+12 layers,
80 mel bins, 30 s / 3000-frame log-mel inputs, 51865 vocab): fp32 weights, bf16 autocast, `labels` with
-100 padding (the model shifts them into decoder inputs), AdamW, a frozen-encoder-conv first step then
full fine-tuning for 2 steps."""

import os

import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

D, LAYERS, HEADS, FF, VOCAB, MELS, FRAMES, B, TGT = (
    (32, 1, 2, 64, 200, 8, 60, 2, 10)
    if os.environ.get("SMOKE")
    else (768, 12, 12, 3072, 51865, 80, 3000, 16, 128)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(503)

config = WhisperConfig(
    vocab_size=VOCAB,
    num_mel_bins=MELS,
    d_model=D,
    encoder_layers=LAYERS,
    decoder_layers=LAYERS,
    encoder_attention_heads=HEADS,
    decoder_attention_heads=HEADS,
    encoder_ffn_dim=FF,
    decoder_ffn_dim=FF,
    max_source_positions=FRAMES // 2,
    max_target_positions=448 if not os.environ.get("SMOKE") else 32,
    pad_token_id=VOCAB - 1,
    bos_token_id=VOCAB - 2,
    eos_token_id=VOCAB - 1,
    decoder_start_token_id=VOCAB - 3,
    dropout=0.0,
    use_cache=False,
)
model = WhisperForConditionalGeneration(config).to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def batch():
    feats = torch.randn(B, MELS, FRAMES, device=device)
    labels = torch.randint(0, VOCAB - 10, (B, TGT), device=device)
    lengths = torch.randint(TGT // 3, TGT + 1, (B,), device=device)
    labels = labels.masked_fill(torch.arange(TGT, device=device)[None, :] >= lengths[:, None], -100)
    return feats, labels


model.train()
model.model.encoder.conv1.requires_grad_(False)
model.model.encoder.conv2.requires_grad_(False)
for step in range(3):
    if step == 1:
        model.model.encoder.conv1.requires_grad_(True)
        model.model.encoder.conv2.requires_grad_(True)
    feats, labels = batch()
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(input_features=feats, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
