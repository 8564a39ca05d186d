"""SpeechT5 voice conversion fine-tuning (SpeechT5ForSpeechToSpeech from SpeechT5Config at
speecht5_vc's size: 768 wide, 12 encoder and 6 decoder layers, 12 heads, feed-forward 3,072, the
group-norm waveform feature encoder, the speech decoder prenet with 512-d speaker x-vectors,
reduction factor 2, 80 mel bins; fp32 weights) as its user writes it without a loss from the model:
source waveforms of 16 kHz seeded noise (4 to 8 s, zero-padded with the attention_mask), target
log10-mel spectrograms computed on the GPU by hand as SpeechT5FeatureExtractor defines them (n_fft
1,024, win 1,024 hann, hop 256, fmin 80, fmax 7,600, torch.stft then |.|, an 80-band Slaney mel
filterbank matmul, log10 of the clamp at 1e-10), padded to an even length with -100 and a
decoder_attention_mask; the model shifts the labels right itself; the loss is the L1 of the
postnet spectrogram over the unpadded frames. fp16 autocast with GradScaler, AdamW (lr 1e-5, weight
decay 0.01) with a warmup LambdaLR, clip_grad_norm_ at 1.0 after unscale_, batch 16, the feature
encoder frozen; 4 steps (the first its own phase); then a teacher-forced evaluation of 32 utterances
at batch 16 under no_grad and autocast; then SpeechT5HifiGan from its config (upsampling 4 x 4 x 4 x 4
from 512 channels, normalize_before) cast to fp16, synthesising 8 of the predicted spectrograms
under inference_mode; 4 phases."""

import math
import os

import torch
import torch.nn.functional as F
from transformers import SpeechT5Config, SpeechT5ForSpeechToSpeech, SpeechT5HifiGan, SpeechT5HifiGanConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16806)
if SMALL:
    config = SpeechT5Config(
        hidden_size=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        conv_dim=(16, 16, 16, 16, 16, 16, 16),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        speech_decoder_prenet_units=32,
        speech_decoder_postnet_units=32,
    )
    voc_config = SpeechT5HifiGanConfig(upsample_initial_channel=32)
    B, SEC_MIN, SEC_MAX, STEPS, EVAL_N, VOC_N = 2, 1.0, 1.5, 2, 4, 2
else:
    config = SpeechT5Config()
    voc_config = SpeechT5HifiGanConfig()
    B, SEC_MIN, SEC_MAX, STEPS, EVAL_N, VOC_N = 16, 4.0, 8.0, 4, 32, 8
N_FFT, HOP, N_MELS, SR = 1024, 256, 80, 16000
device = "cuda" if torch.cuda.is_available() else "cpu"
model = SpeechT5ForSpeechToSpeech(config).to(device)
model.freeze_feature_encoder()
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.01)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 500))
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
gen = torch.Generator().manual_seed(16806)


def slaney_mel(n_mels=N_MELS, n_fft=N_FFT, sr=SR, fmin=80.0, fmax=7600.0):
    def hz_to_mel(f):
        f = torch.as_tensor(f, dtype=torch.float64)
        return torch.where(
            f >= 1000.0, 15.0 + torch.log(f.clamp(min=1e-10) / 1000.0) * 27.0 / math.log(6.4), f * 3.0 / 200.0
        )

    def mel_to_hz(m):
        return torch.where(m >= 15.0, 1000.0 * torch.exp((m - 15.0) * math.log(6.4) / 27.0), m * 200.0 / 3.0)

    freqs = torch.linspace(0, sr / 2, n_fft // 2 + 1, dtype=torch.float64)
    hz = mel_to_hz(
        torch.linspace(float(hz_to_mel(fmin)), float(hz_to_mel(fmax)), n_mels + 2, dtype=torch.float64)
    )
    lower = (freqs[None, :] - hz[:-2, None]) / (hz[1:-1, None] - hz[:-2, None])
    upper = (hz[2:, None] - freqs[None, :]) / (hz[2:, None] - hz[1:-1, None])
    return (torch.clamp(torch.minimum(lower, upper), min=0.0) * (2.0 / (hz[2:] - hz[:-2]))[:, None]).float()


MEL = slaney_mel().to(device)
WINDOW = torch.hann_window(N_FFT).to(device)
vocoder = None
print(f"trainable {sum(p.numel() for p in params)}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def log_mel(wave):
    spec = torch.stft(wave, N_FFT, HOP, N_FFT, window=WINDOW, center=True, return_complex=True).abs()
    return torch.log10(torch.clamp(MEL @ spec, min=1e-10)).transpose(1, 2)  # (B, T, 80)


def batch(n):
    lengths = [int(SR * (SEC_MIN + (SEC_MAX - SEC_MIN) * i / max(n - 1, 1))) for i in range(n)][::-1]
    src = torch.zeros(n, max(lengths))
    src_mask = torch.zeros(n, max(lengths), dtype=torch.long)
    tgt = torch.zeros(n, max(lengths))
    for i, ln in enumerate(lengths):
        src[i, :ln] = 0.1 * torch.randn(ln, generator=gen)
        src_mask[i, :ln] = 1
        tgt[i, :ln] = 0.1 * torch.randn(ln, generator=gen)
    mels = log_mel(tgt.to(device))
    frames = [ln // HOP + 1 for ln in lengths]
    t = max(frames) + max(frames) % 2
    labels = torch.full((n, t, N_MELS), -100.0, device=device)
    dec_mask = torch.zeros(n, t, dtype=torch.long, device=device)
    for i, f in enumerate(frames):
        labels[i, :f] = mels[i, :f]
        dec_mask[i, :f] = 1
    spk = F.normalize(torch.randn(n, 512, generator=gen), dim=-1)
    return src.to(device), src_mask.to(device), labels, dec_mask, spk.to(device)


def masked_l1(pred, labels):
    valid = labels != -100.0
    return (pred.float() - labels).abs().masked_select(valid).mean()


model.train()
for step in range(STEPS):
    src, src_mask, labels, dec_mask, spk = batch(B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        out = model(
            input_values=src,
            attention_mask=src_mask,
            labels=labels,
            decoder_attention_mask=dec_mask,
            speaker_embeddings=spk,
        )
        loss = masked_l1(out.spectrogram, labels)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} frames {labels.shape[1]} loss {loss.item():.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del src, src_mask, labels, dec_mask, spk, out, loss

model.eval()
total, kept = 0.0, []
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    for _ in range(EVAL_N // B):
        src, src_mask, labels, dec_mask, spk = batch(B)
        out = model(
            input_values=src,
            attention_mask=src_mask,
            labels=labels,
            decoder_attention_mask=dec_mask,
            speaker_embeddings=spk,
        )
        total += masked_l1(out.spectrogram, labels).item()
        kept.append(out.spectrogram[:VOC_N].float())
print(f"eval l1 {total / (EVAL_N // B):.4f}")
del src, src_mask, labels, dec_mask, spk, out
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

vocoder = SpeechT5HifiGan(voc_config).to(device)
vocoder = vocoder.half() if device == "cuda" else vocoder
with torch.inference_mode():
    spectrogram = kept[-1].to(next(vocoder.parameters()).dtype)
    wav = vocoder(spectrogram)
print(f"vocoder {tuple(wav.shape)} {wav.dtype}")
if device == "cuda":
    print(
        f"vocoder allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
