"""HF VisionEncoderDecoderModel (a ViT encoder and a GPT-2 decoder with cross-attention, both from
configs) trained on 224x224 images with 32-token captions at batch 16 under bf16 autocast (AdamW,
2 steps), then beam search (4 beams, 24 new tokens) at batch 8; 4 phases."""

import os

import torch
from transformers import GPT2Config, VisionEncoderDecoderConfig, VisionEncoderDecoderModel, ViTConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5702)
if SMALL:
    enc = ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32
    )
    dec = GPT2Config(vocab_size=200, n_embd=32, n_layer=1, n_head=2, n_positions=64)
    B, L, HW, NEW = 2, 8, 32, 4
else:
    enc = ViTConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
    dec = GPT2Config(vocab_size=50257, n_embd=768, n_layer=6, n_head=12, n_positions=128)
    B, L, HW, NEW = 16, 32, 224, 24
config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
config.decoder_start_token_id = 0
config.pad_token_id = 0
config.eos_token_id = 1
device = "cuda" if torch.cuda.is_available() else "cpu"
model = VisionEncoderDecoderModel(config=config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    pixels = torch.randn(B, 3, HW, HW, device=device)
    labels = torch.randint(2, dec.vocab_size, (B, L), device=device)
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
with torch.no_grad():
    pixels = torch.randn(B // 2, 3, HW, HW, device=device)
    out = model.generate(pixel_values=pixels, num_beams=4, max_new_tokens=NEW, min_new_tokens=NEW)
if device == "cuda":
    print(f"generate {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}")
