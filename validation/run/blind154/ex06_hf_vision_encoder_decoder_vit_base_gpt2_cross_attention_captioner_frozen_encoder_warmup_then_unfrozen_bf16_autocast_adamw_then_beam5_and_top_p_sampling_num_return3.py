"""An image captioner as Hugging Face's VisionEncoderDecoderModel, both towers from configs (a
ViT-B/16 encoder: 224 x 224, 768 wide, 12 layers; a GPT-2 decoder of 12 layers 768 wide with
cross-attention added by from_encoder_decoder_configs, vocabulary 50,257, 128 positions; fp32
weights, TF32 on): captions of 40 tokens (the pad tail -100) at batch 48, bf16 autocast, AdamW (the
encoder at lr 1e-5, the decoder at 5e-5) with clip_grad_norm_ at 1.0; the encoder frozen
(requires_grad_(False)) for the first 2 steps then unfrozen for 3 more (its Adam states made at the
third step); then captions of 16 images by beam search (5 beams, 30 new tokens fixed by
min_new_tokens) and of 16 more by nucleus sampling (top_p 0.9, temperature 0.8, 3 captions an image)
under inference_mode and bf16 autocast; 6 phases."""

import os

import torch
from transformers import GPT2Config, VisionEncoderDecoderConfig, VisionEncoderDecoderModel, ViTConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15406)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
if SMALL:
    enc = ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32
    )
    dec = GPT2Config(vocab_size=300, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    B, L, HW, GEN_B, NEW = 4, 10, 32, 2, 6
else:
    enc = ViTConfig(
        hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, image_size=224
    )
    dec = GPT2Config(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=128)
    B, L, HW, GEN_B, NEW = 48, 40, 224, 16, 30
config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
BOS = EOS = dec.vocab_size - 1
config.decoder_start_token_id = BOS
config.pad_token_id = EOS
config.eos_token_id = EOS
device = "cuda" if torch.cuda.is_available() else "cpu"
model = VisionEncoderDecoderModel(config=config).to(device)
optimizer = torch.optim.AdamW(
    [
        {"params": model.encoder.parameters(), "lr": 1e-5},
        {"params": model.decoder.parameters(), "lr": 5e-5},
    ],
    weight_decay=0.01,
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    pixels = torch.randn(n, 3, HW, HW, device=device)
    labels = torch.randint(0, dec.vocab_size - 1, (n, L), device=device)
    for i in range(n):
        end = L - (i % 5) * (L // 8)
        labels[i, end - 1] = EOS
        labels[i, end:] = -100
    return pixels, labels


def train_step():
    pixels, labels = batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(pixel_values=pixels, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


model.train()
model.encoder.requires_grad_(False)
for step in range(2):
    print(f"frozen step {step} loss {train_step():.4f}")
if device == "cuda":
    print(f"frozen peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.encoder.requires_grad_(True)
for step in range(3):
    print(f"unfrozen step {step} loss {train_step():.4f}")
    if device == "cuda" and step == 0:
        print(
            f"unfrozen first peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
if device == "cuda":
    print(
        f"unfrozen allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    pixels, _ = batch(GEN_B)
    beams = model.generate(pixel_values=pixels, num_beams=5, max_new_tokens=NEW, min_new_tokens=NEW)
    print(f"beam captions {tuple(beams.shape)}")
    if device == "cuda":
        print(f"beam peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    pixels, _ = batch(GEN_B)
    samples = model.generate(
        pixel_values=pixels,
        do_sample=True,
        top_p=0.9,
        temperature=0.8,
        num_return_sequences=3,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
    )
print(f"sampled captions {tuple(samples.shape)}")
if device == "cuda":
    print(f"sample peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
