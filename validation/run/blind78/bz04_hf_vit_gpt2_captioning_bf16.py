"""HF VisionEncoderDecoderModel: a ViT-base encoder and a 6-layer GPT-2 decoder with cross-attention,
both built from configs, fp32 weights under bf16 autocast, trained on 64-token captions at batch 32
with AdamW, 2 steps; then greedy captions of exactly 24 tokens at batch 8; 4 phases."""

import os

import torch
from transformers import GPT2Config, VisionEncoderDecoderConfig, VisionEncoderDecoderModel, ViTConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7804)
if SMALL:
    enc = ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    dec = GPT2Config(vocab_size=100, n_embd=32, n_layer=1, n_head=2, n_positions=64)
    B, S, T, NEW = 2, 32, 8, 4
else:
    enc = ViTConfig(
        image_size=224,
        patch_size=16,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
    )
    dec = GPT2Config(vocab_size=50257, n_embd=768, n_layer=6, n_head=12, n_positions=256)
    B, S, T, NEW = 32, 224, 64, 24
config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
config.decoder_start_token_id = 0
config.pad_token_id = 0
device = "cuda" if torch.cuda.is_available() else "cpu"
model = VisionEncoderDecoderModel(config=config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    pixels = torch.randn(B, 3, S, S, device=device)
    labels = torch.randint(1, dec.vocab_size, (B, T), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(pixel_values=pixels, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del pixels, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    out = model.generate(
        pixel_values=torch.randn(8, 3, S, S, device=device),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        eos_token_id=None,
    )
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
