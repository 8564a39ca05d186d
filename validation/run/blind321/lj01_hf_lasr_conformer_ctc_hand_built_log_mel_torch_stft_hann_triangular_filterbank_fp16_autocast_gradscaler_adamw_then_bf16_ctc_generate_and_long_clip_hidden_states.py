"""Speech recognition with HF LASR (model_type "lasr_ctc"): LasrForCTC from a LasrCTCConfig whose
LasrEncoderConfig is a 6-layer, 384-wide conformer (rotary attention, depthwise convolution module,
two stride-2 subsampling convolutions, 80 mel bins, 256 sentencepiece-like symbols). No torchaudio:
the log-mel features are computed by hand on the GPU: torch.stft (n_fft 512, hop 160, periodic Hann
window) of 16 kHz audio, power spectrum, a triangular mel filterbank built by hand (80 bands), log with
a floor, per-utterance mean/variance normalisation over valid frames. Training: fp32 weights, fp16
autocast with GradScaler (init_scale 1024), AdamW, batches of 8 clips of 5 to 9 s padded with an
attention mask, transcripts padded with the pad/blank id 0; 3 steps with grad clipping after
unscale_. Then eval: LasrForCTC.generate (greedy CTC) of a padded batch of 12 clips under bf16
autocast, and the per-layer hidden states of a 25 s clip in fp32.

Phases: 0 model, optimizer and filterbank built; 1 first step; 2 two more steps; 3 batched CTC
generate in bf16; 4 long clip with output_hidden_states."""

import math

import torch
from transformers import LasrCTCConfig, LasrEncoderConfig, LasrForCTC

torch.manual_seed(3211)
device = "cuda"
SR, N_FFT, HOP, N_MELS = 16000, 512, 160, 80

enc = LasrEncoderConfig(
    hidden_size=384,
    num_hidden_layers=6,
    num_attention_heads=6,
    intermediate_size=1536,
    conv_kernel_size=15,
    subsampling_conv_channels=192,
    num_mel_bins=N_MELS,
    layerdrop=0.0,
)
config = LasrCTCConfig(encoder_config=enc.to_dict(), vocab_size=256, pad_token_id=0)


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def mel_filterbank(n_mels, n_fft, sr):
    def hz_to_mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    mels = torch.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    lower, center, upper = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (bins[None, :] - lower) / (center - lower)
    down = (upper - bins[None, :]) / (upper - center)
    return torch.clamp(torch.minimum(up, down), min=0.0)


fbank = mel_filterbank(N_MELS, N_FFT, SR).to(device)
window = torch.hann_window(N_FFT, device=device)


def log_mel(audio, lengths):
    spec = torch.stft(audio, N_FFT, HOP, window=window, center=True, return_complex=True)
    power = spec.real.pow(2) + spec.imag.pow(2)
    mel = torch.matmul(fbank, power).clamp_min(1e-10).log()
    frames = lengths // HOP + 1
    valid = torch.arange(mel.shape[-1], device=device)[None, :] < frames[:, None]
    denom = valid.sum(-1, keepdim=True)[:, None]
    mean = (mel * valid[:, None]).sum(-1, keepdim=True) / denom
    var = ((mel - mean).pow(2) * valid[:, None]).sum(-1, keepdim=True) / denom
    mel = ((mel - mean) / (var + 1e-5).sqrt()).masked_fill(~valid[:, None], 0.0)
    return mel.transpose(1, 2).contiguous(), valid.long()


def clips(n, lo, hi):
    lengths = (torch.linspace(lo, hi, n) * SR).long()
    audio = torch.zeros(n, int(lengths.max()))
    for i, s in enumerate(lengths.tolist()):
        audio[i, :s] = torch.randn(s) * 0.1
    return audio.to(device), lengths.to(device)


model = LasrForCTC(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
scaler = torch.amp.GradScaler("cuda", init_scale=1024.0)
report("built")

model.train()
B, L = 8, 60
for step in range(3):
    audio, lengths = clips(B, 5, 9)
    with torch.no_grad():
        feats, fmask = log_mel(audio, lengths)
    lab_len = torch.randint(L // 2, L + 1, (B,))
    labels = torch.randint(1, config.vocab_size, (B, L))
    labels = labels.masked_fill(torch.arange(L)[None, :] >= lab_len[:, None], 0).to(device)
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(input_features=feats, attention_mask=fmask, labels=labels)
    scaler.scale(out.loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, audio, feats, fmask, labels
    if step == 0:
        report("step0")
report("steps1-2")

model.eval()
audio, lengths = clips(12, 3, 10)
with torch.no_grad():
    feats, fmask = log_mel(audio, lengths)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ids = model.generate(input_features=feats, attention_mask=fmask)
print("generated", tuple(ids.shape))
del audio, feats, fmask, ids
report("generate")

audio, lengths = clips(1, 25, 25)
with torch.no_grad():
    feats, fmask = log_mel(audio, lengths)
    out = model(input_features=feats, output_hidden_states=True)
    norms = torch.stack([h.norm(dim=-1).mean() for h in out.hidden_states]).cpu()
print("hidden states", len(out.hidden_states), tuple(out.logits.shape), norms.shape)
del out, feats, audio
report("hidden_states")
