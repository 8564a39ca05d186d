"""HF ClapModel (LAION-CLAP-like: an HTSAT Swin audio encoder over 1,001x64 log-mel frames resized by
bicubic interpolation to a 256x256 spectrogram image, a RoBERTa-base text encoder, 512-wide
projections) trained contrastively (`return_loss=True`) on 24 audio-caption pairs under bf16
autocast, AdamW with gradient clipping, 2 steps; then text-to-audio retrieval embeddings of 64
captions and 64 clips under inference_mode; 3 phases."""

import os

import torch
from transformers import ClapAudioConfig, ClapConfig, ClapModel, ClapTextConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8403)
if SMALL:
    audio = ClapAudioConfig(
        spec_size=64,
        num_mel_bins=16,
        window_size=4,
        depths=[1, 1],
        num_attention_heads=[2, 4],
        patch_embeds_hidden_size=16,
        hidden_size=32,
        projection_dim=16,
    )
    text = ClapTextConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    config = ClapConfig(text_config=text.to_dict(), audio_config=audio.to_dict(), projection_dim=16)
    B, E, FRAMES, WORDS = 2, 4, 101, 8
else:
    config = ClapConfig()
    B, E, FRAMES, WORDS = 24, 64, 1001, 32
MELS = config.audio_config.num_mel_bins
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ClapModel(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.2)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
vocab = config.text_config.vocab_size
for step in range(2):
    mel = torch.randn(B, 1, FRAMES, MELS, device=device)
    ids = torch.randint(3, vocab, (B, WORDS), device=device)
    mask = torch.ones_like(ids)
    mask[B // 2 :, WORDS // 2 :] = 0
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, attention_mask=mask, input_features=mel, return_loss=True).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    text_emb = model.get_text_features(
        input_ids=torch.randint(3, vocab, (E, WORDS), device=device)
    ).pooler_output
    clips = torch.randn(E, 1, FRAMES, MELS, device=device).split(16)
    audio_emb = torch.cat([model.get_audio_features(input_features=x).pooler_output for x in clips])
    sims = (
        torch.nn.functional.normalize(text_emb, dim=-1) @ torch.nn.functional.normalize(audio_emb, dim=-1).t()
    )
    best = sims.argmax(-1)
if device == "cuda":
    print(f"retrieval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
