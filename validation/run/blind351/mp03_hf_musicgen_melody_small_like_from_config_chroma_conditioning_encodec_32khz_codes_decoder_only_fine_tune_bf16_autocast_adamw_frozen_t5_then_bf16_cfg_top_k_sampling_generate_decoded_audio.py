"""MusicGen-Melody at the small model's sizes with Hugging Face's MusicgenMelodyForConditionalGeneration built
from a MusicgenMelodyConfig: a T5-base text encoder, a 32 kHz EnCodec (4 codebooks of 2,048, 50 frames a
second), a 24-layer 1,024-wide decoder whose conditioning is the 12-bin chroma of the melody (235 frames,
projected to 1,024) prepended to the projected text states; random init.

First the decoder alone is fine-tuned the way audiocraft's solver does: the text encoder and EnCodec frozen,
the target clips encoded to codes by `audio_encoder.encode()` under `no_grad`, the codes given as labels
(batch, frames, codebooks) so the model shifts them and sums a cross-entropy per codebook, bf16
`torch.autocast`, AdamW over the decoder and the projections only. Then the model is cast to bf16 and
sampled with classifier-free guidance (scale 3: the conditioning doubled with a null half) and top-k 250,
conditioned on text and chroma, and the codes decoded to waveforms by EnCodec inside `generate()`.

Phases: 0 model (fp32) and optimizer; 1 two fine-tuning steps on 4 clips of 10 s (500 frames);
2 bf16 cast, CFG sampling of 4 x 6 s (300 new frames) with melody; 3 2 prompts x 4 s, text only.
Seeded; generation has no end token, so every length is fixed."""

import os

import torch
from transformers import (
    EncodecConfig,
    MusicgenMelodyConfig,
    MusicgenMelodyDecoderConfig,
    MusicgenMelodyForConditionalGeneration,
    T5Config,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(351_03)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    text = T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)
    audio = EncodecConfig(
        sampling_rate=8000,
        hidden_size=16,
        num_filters=4,
        upsampling_ratios=[4, 4],
        codebook_size=32,
        codebook_dim=16,
        target_bandwidths=[10.0],
        num_lstm_layers=1,
    )
    decoder = MusicgenMelodyDecoderConfig(
        vocab_size=32,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        ffn_dim=64,
        num_codebooks=4,
        pad_token_id=32,
        bos_token_id=32,
    )
    PROMPT, TRAIN_B, TRAIN_S, GEN1, GEN2, CHROMA = 6, 2, 0.25, 12, 8, 20
else:
    text = T5Config(vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12)
    audio = EncodecConfig(
        sampling_rate=32000,
        hidden_size=128,
        num_filters=64,
        upsampling_ratios=[8, 5, 4, 4],
        codebook_size=2048,
        codebook_dim=128,
        target_bandwidths=[2.2],
        num_lstm_layers=2,
        normalize=False,
    )
    decoder = MusicgenMelodyDecoderConfig(
        vocab_size=2048,
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        ffn_dim=4096,
        num_codebooks=4,
    )
    PROMPT, TRAIN_B, TRAIN_S, GEN1, GEN2, CHROMA = 20, 4, 10.0, 300, 200, 235
config = MusicgenMelodyConfig(
    text_encoder=text.to_dict(),
    audio_encoder=audio.to_dict(),
    decoder=decoder.to_dict(),
    chroma_length=CHROMA,
)
config.decoder_start_token_id = config.pad_token_id = decoder.vocab_size


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


model = MusicgenMelodyForConditionalGeneration(config).to(device)
model.generation_config.decoder_start_token_id = decoder.vocab_size
model.generation_config.pad_token_id = decoder.vocab_size
model.text_encoder.requires_grad_(False)
model.audio_encoder.requires_grad_(False)
trainable = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(trainable, lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1)
n_all = sum(p.numel() for p in model.parameters())
print(f"parameters: {n_all:,}, trainable {sum(p.numel() for p in trainable):,}")
report("phase0 MusicGen-Melody fp32, decoder-only AdamW")


def chroma(b):
    return torch.softmax(torch.randn(b, CHROMA, 12, device=device) * 4, dim=-1)


model.train()
for step in range(2):
    wave = torch.randn(TRAIN_B, 1, int(TRAIN_S * audio.sampling_rate), device=device) * 0.1
    with torch.no_grad():
        codes = model.audio_encoder.encode(wave, bandwidth=audio.target_bandwidths[0]).audio_codes
    labels = codes[0].transpose(1, 2).contiguous()  # (batch, frames, codebooks)
    ids = torch.randint(1, text.vocab_size, (TRAIN_B, PROMPT), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        out = model(
            input_ids=ids, attention_mask=torch.ones_like(ids), input_features=chroma(TRAIN_B), labels=labels
        )
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step}: codes {tuple(labels.shape)}, loss {out.loss.item():.3f}")
del out, wave, codes, labels, ids, optimizer, trainable
report("phase1 two decoder fine-tuning steps, bf16 autocast")

model.to(torch.bfloat16 if cuda else torch.float32).eval()
ids = torch.randint(1, text.vocab_size, (4, PROMPT), device=device)
with torch.inference_mode():
    audio_out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        input_features=chroma(4).to(model.dtype),
        do_sample=True,
        top_k=250,
        guidance_scale=3.0,
        max_new_tokens=GEN1,
    )
print(f"melody-conditioned audio {tuple(audio_out.shape)}")
del audio_out, ids
report("phase2 bf16, CFG top-k sampling with chroma, 4 clips")

ids = torch.randint(1, text.vocab_size, (2, PROMPT), device=device)
with torch.inference_mode():
    audio_out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        top_k=250,
        guidance_scale=3.0,
        max_new_tokens=GEN2,
    )
print(f"text-only audio {tuple(audio_out.shape)}")
del audio_out, ids
report("phase3 bf16, CFG top-k sampling, text only, 2 clips")
