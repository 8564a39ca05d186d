"""Kyutai's Moshi full-duplex speech-text model as the Hugging Face Moshi docs train and run it, with the
weights random and the sizes cut down: a MoshiForConditionalGeneration from a `MoshiConfig` whose temporal
transformer is 1,024 wide, 16 layers, 16 heads (gated FFN of ffn_dim 5,632), text vocabulary 32,000, 8 audio
codebooks of 2,048 per stream; the depth decoder (6 layers, 1,024 wide, per-codebook weights) and the default
Mimi codec (frozen) as MoshiConfig builds them. Both audio streams, the user's and Moshi's own, are raw 24 kHz
waveforms built with torch; one text token per 80 ms Mimi frame (Moshi's inner monologue: a few word tokens,
the rest the text padding token).

Phases: 0 the model cast to bf16 (pure bf16 weights), Mimi and the depth decoder frozen; 1 three
`AdamW(fused=True)` steps over 4 dialogues of 10 s (125 frames): Moshi's stream encoded by Mimi under
`no_grad` (`audio_encoder.encode(..., num_quantizers=8)`) and given as `moshi_audio_codes`, the user's
waveform encoded inside the forward (`user_input_values`), `text_labels` so the temporal transformer trains on
the text stream (with `audio_labels` too the depth decoder's forward gathers a 2,048 x 5,632 weight per
codebook per frame, MoshiFlexibleLinear: 39 GiB for these 500 frames, out of reach of a 20 GB script); 2
`inference_mode` greedy `generate()` of 50 frames (4 s) for 2 dialogues prompted with 2 s of both streams and
their text, the generated codes decoded back to waveforms by Mimi (`return_audio_waveforms`,
`return_audio_codes`); 3 sampling (top-k 250, as Moshi's own sampler) for 4 dialogues, 40 frames. Seeded; no
end token is set, so every generation runs its frames and no sizes depend on values."""

import os

import torch
from transformers import MoshiConfig, MoshiForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3614)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = MoshiConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        ffn_dim=128,
        depth_decoder_config=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128),
    )
    B1, SECONDS1, B2, SECONDS2, NEW2, B3, NEW3 = 2, 1.6, 2, 0.8, 4, 2, 3
else:
    config = MoshiConfig(
        hidden_size=1024,
        num_hidden_layers=16,
        num_attention_heads=16,
        ffn_dim=5632,
        depth_decoder_config={},
    )
    B1, SECONDS1, B2, SECONDS2, NEW2, B3, NEW3 = 4, 10.0, 2, 2.0, 50, 4, 40
RATE, SAMPLES_PER_FRAME, TEXT_PAD = 24000, 1920, 3
dtype = torch.bfloat16 if cuda else torch.float32


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


def speech(batch, seconds):
    """Raw 24 kHz speech-like waveforms on the device, (batch, 1, samples)."""
    n = int(seconds * RATE)
    t = torch.arange(n, device=device) / RATE
    pitch = 90 + 150 * torch.rand(batch, 1, device=device)
    wave = torch.sin(2 * torch.pi * pitch * t) + 0.5 * torch.sin(4 * torch.pi * pitch * t)
    syllables = (torch.sin(2 * torch.pi * 4 * t) > -0.2).float()
    wave = 0.25 * wave * syllables + 0.01 * torch.randn(batch, n, device=device)
    return wave.unsqueeze(1).to(dtype)


def monologue(batch, frames):
    """One text token per frame: a word token every fourth frame, the text padding token elsewhere."""
    ids = torch.full((batch, frames), TEXT_PAD, dtype=torch.long)
    ids[:, ::4] = torch.randint(100, 32000, (batch, (frames + 3) // 4))
    return ids.to(device)


model = MoshiForConditionalGeneration(config).to(device, dtype)
model.audio_encoder.requires_grad_(False)
# the depth decoder trains only with audio_labels, whose forward gathers a (2,048 x 5,632) weight per
# codebook per frame (MoshiFlexibleLinear: 39 GiB for 4 x 125 frames); the fine-tune trains the temporal
# transformer's text stream (text_labels only) and keeps the depth decoder frozen
model.depth_decoder.requires_grad_(False)
trainable = [p for p in model.parameters() if p.requires_grad]
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,} "
    f"trainable {sum(p.numel() for p in trainable):,}"
)
report("phase0 moshi pure bf16, mimi frozen")

optimizer = torch.optim.AdamW(trainable, lr=3e-5, weight_decay=0.1, fused=cuda)
model.train()
for step in range(3):
    frames = int(SECONDS1 * RATE) // SAMPLES_PER_FRAME
    moshi_wave, user_wave = speech(B1, SECONDS1), speech(B1, SECONDS1)
    with torch.no_grad():
        moshi_codes = model.audio_encoder.encode(moshi_wave, num_quantizers=config.num_codebooks).audio_codes
    text = monologue(B1, frames)
    out = model(
        input_ids=text,
        user_input_values=user_wave,
        moshi_audio_codes=moshi_codes,
        text_labels=text,
    )
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} text loss {out.loss.item():.3f} codes {tuple(moshi_codes.shape)}")
    del out
report(f"phase1 pure bf16 fused adamw, {B1} dialogues of {SECONDS1:g} s")

del optimizer, trainable
model.eval()
with torch.inference_mode():
    frames = int(SECONDS2 * RATE) // SAMPLES_PER_FRAME
    out = model.generate(
        input_ids=monologue(B2, frames),
        user_input_values=speech(B2, SECONDS2),
        moshi_input_values=speech(B2, SECONDS2),
        max_new_tokens=NEW2,
        do_sample=False,
        depth_decoder_disable_compile=True,
        return_audio_waveforms=True,
        return_audio_codes=True,
    )
    print(
        f"text {tuple(out.sequences.shape)} codes {tuple(out.audio_codes.shape)} "
        f"audio {tuple(out.audio_sequences.shape)}"
    )
    del out
report(f"phase2 inference_mode greedy generate {NEW2} frames, {B2} dialogues, waveforms decoded")

with torch.inference_mode():
    out = model.generate(
        input_ids=monologue(B3, frames),
        user_input_values=speech(B3, SECONDS2),
        moshi_input_values=speech(B3, SECONDS2),
        max_new_tokens=NEW3,
        do_sample=True,
        depth_decoder_disable_compile=True,
        top_k=250,
        temperature=0.8,
    )
    print(f"sampled text {tuple(out.sequences.shape)} audio {tuple(out.audio_sequences.shape)}")
report(f"phase3 inference_mode sampling top-k 250, {NEW3} frames, {B3} dialogues")
