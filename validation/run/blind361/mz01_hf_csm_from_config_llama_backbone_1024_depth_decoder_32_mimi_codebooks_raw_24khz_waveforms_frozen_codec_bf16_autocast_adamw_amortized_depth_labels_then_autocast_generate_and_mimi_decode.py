"""Fine-tuning and running Sesame's conversational speech model (CSM) as the Hugging Face CSM docs do, with
the weights random: a CsmForConditionalGeneration from a `CsmConfig` whose Llama-style backbone is 1,024 wide
and 12 layers deep (the default depth decoder: 4 layers, 1,024 wide, predicting codebooks 1..31 from the
backbone's last hidden state; the default Mimi codec with 32 codebooks at 12.5 frames a second inside the
model, frozen). The chat template's token layout is written by hand, as CsmProcessor lays it out: a
`<|begin_of_text|>` token, the speaker's text tokens, one `<|AUDIO|>` token per Mimi frame, an `<|audio_eos|>`
token; the audio is raw 24 kHz waveforms built with torch (sines plus noise), which the model encodes with its
Mimi codec under `no_grad` (input_values and input_values_cutoffs, one segment an entry). Training labels as
the processor's `output_labels=True` makes them: the audio frames and the audio-eos token are targets, and
with `depth_decoder_labels_ratio=0.25` three quarters of the frames (a seeded host `randperm`) are -101,
trained only through the backbone's first codebook (CSM's compute amortization).

Phases: 0 the model in fp32, codec frozen; 1 three AdamW steps under bf16 autocast over 8 conversations of 24
text tokens + 8 s of audio (100 frames); 2 the fp32 model under bf16 autocast, `inference_mode`, greedy
`generate()` of 32 audio frames (every frame: one backbone step, then the depth decoder's own generate of 31
codebooks) for 2 prompts of context audio (4 s) plus new text; 3 the same with `output_audio=True`, the codes
decoded to waveforms by Mimi, for 3 prompts (codebook ids past Mimi's 2,048 codes suppressed in the backbone
and the depth decoder: `suppress_tokens`, `depth_decoder_suppress_tokens`). The model is not cast to bf16 for
generation: Mimi caches its codebooks in fp32 at the first encode (`MimiEuclideanCodebook._embed`, which
`.to(torch.bfloat16)` does not convert), and transformers 5.17's Mimi decode then feeds fp32 into its bf16
convolutions and raises. Seeded; the only value-dependent size is CSM's end-of-audio check (all codebooks 0),
which random weights do not meet, so every generation runs its 32 frames."""

import os

import torch
from transformers import CsmConfig, CsmForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3611)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = CsmConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        depth_decoder_config=dict(
            backbone_hidden_size=64,
            hidden_size=64,
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
        ),
    )
    B1, TEXT, SECONDS1, B2, SECONDS2, NEW, B3 = 2, 6, 1.6, 2, 0.8, 4, 2
else:
    config = CsmConfig(
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
        depth_decoder_config=dict(backbone_hidden_size=1024),
    )
    B1, TEXT, SECONDS1, B2, SECONDS2, NEW, B3 = 8, 24, 8.0, 2, 4.0, 32, 3
RATE = 24000
SAMPLES_PER_FRAME = 1920  # Mimi: 24 kHz / 12.5 frames a second
BOS, AUDIO, AUDIO_EOS = config.bos_token_id, config.audio_token_id, config.audio_eos_token_id
# codebook ids 2048..2050 (padding and the like) are past Mimi's 2,048 codes: a random model may pick them,
# so the generation whose codes Mimi decodes suppresses them (Mimi's embedding would index out of range)
SPECIAL = list(range(config.codec_config.codebook_size, config.vocab_size))


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


def waveforms(batch, seconds):
    """Speech-like raw audio: a few harmonics of a per-utterance pitch, an amplitude envelope, noise."""
    n = int(seconds * RATE)
    t = torch.arange(n, dtype=torch.float32) / RATE
    pitch = 100 + 150 * torch.rand(batch, 1)
    wave = sum(torch.sin(2 * torch.pi * k * pitch * t) / k for k in (1, 2, 3))
    envelope = 0.5 + 0.5 * torch.sin(2 * torch.pi * 3 * t)
    return (0.3 * wave * envelope + 0.01 * torch.randn(batch, n)).unsqueeze(1)  # (batch, 1, samples)


def conversation(batch, text, seconds, with_audio_target=True, new_text=0):
    """Token ids as CsmProcessor's chat template lays them out (text, then one AUDIO token per frame)."""
    frames = int(seconds * RATE) // SAMPLES_PER_FRAME
    rows = []
    for _ in range(batch):
        row = [BOS] + torch.randint(1000, 120000, (text,)).tolist() + [AUDIO] * frames + [AUDIO_EOS]
        if new_text:
            row += [BOS, *torch.randint(1000, 120000, (new_text,)).tolist()]
        rows.append(row)
    ids = torch.tensor(rows)
    values = waveforms(batch, seconds)
    cutoffs = torch.full((batch, 1), values.shape[-1])
    return ids, values, cutoffs


model = CsmForConditionalGeneration(config).to(device)
model.codec_model.requires_grad_(False)
trainable = [p for p in model.parameters() if p.requires_grad]
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,} "
    f"trainable {sum(p.numel() for p in trainable):,}"
)
report("phase0 csm fp32, mimi codec frozen")

optimizer = torch.optim.AdamW(trainable, lr=2e-5, weight_decay=0.01)
model.train()
for step in range(3):
    ids, values, cutoffs = conversation(B1, TEXT, SECONDS1)
    # labels as CsmProcessor(output_labels=True, depth_decoder_labels_ratio=0.25) builds them, on the host
    frame_idxs = (ids == AUDIO).nonzero()
    skip = frame_idxs[torch.randperm(frame_idxs.shape[0])[: int(frame_idxs.shape[0] * 0.75)]]
    labels = torch.where((ids == AUDIO) | (ids == AUDIO_EOS), ids, -100)
    labels[skip[:, 0], skip[:, 1]] = -101
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model(
            input_ids=ids.to(device),
            input_values=values.to(device),
            input_values_cutoffs=cutoffs.to(device),
            labels=labels.to(device),
        )
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(
        f"step {step} loss {out.loss.item():.3f} backbone {out.backbone_loss.item():.3f} "
        f"depth {out.depth_decoder_loss.item():.3f}"
    )
    del out
report(f"phase1 bf16 autocast adamw, {B1} conversations of {TEXT} text tokens + {SECONDS1:g} s audio")

del optimizer, trainable
model.eval()
# fp32 weights under bf16 autocast: a cast of the model to bf16 here would leave Mimi's codebooks as the fp32
# tensors its first encode cached (MimiEuclideanCodebook._embed, a plain attribute `.to()` does not convert),
# and Mimi's decode would feed fp32 into its bf16 convolution (transformers 5.17: a dtype error)
autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda)
with torch.inference_mode(), autocast:
    ids, values, cutoffs = conversation(B2, TEXT, SECONDS2, new_text=TEXT)
    codes = model.generate(
        input_ids=ids.to(device),
        input_values=values.to(device),
        input_values_cutoffs=cutoffs.to(device),
        max_new_tokens=NEW,
        do_sample=False,
        depth_decoder_do_sample=False,
    )
    print(f"generated codes {tuple(codes.shape)}")
report(f"phase2 bf16 autocast inference_mode greedy generate {NEW} frames x 32 codebooks, {B2} prompts")

del codes
with torch.inference_mode(), autocast:
    ids, values, cutoffs = conversation(B3, TEXT, SECONDS2, new_text=TEXT)
    audio = model.generate(
        input_ids=ids.to(device),
        input_values=values.to(device),
        input_values_cutoffs=cutoffs.to(device),
        max_new_tokens=NEW,
        do_sample=False,
        depth_decoder_do_sample=False,
        suppress_tokens=SPECIAL,
        depth_decoder_suppress_tokens=SPECIAL,
        output_audio=True,
    )
    print(f"decoded audio {[tuple(a.shape) for a in audio]}")
report(f"phase3 generate {NEW} frames with output_audio=True (mimi decode), {B3} prompts")
