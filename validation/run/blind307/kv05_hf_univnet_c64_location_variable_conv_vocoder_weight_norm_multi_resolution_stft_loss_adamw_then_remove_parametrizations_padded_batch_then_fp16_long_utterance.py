"""Neural vocoder training and synthesis with HF UnivNet (model_type "univnet"): UnivNetModel in its
c64 size (64 hidden channels, 100 mel bins, hop 256 from strides 8 x 8 x 4, a kernel predictor per
resblock emitting the weights of its location-variable convolutions: unfold + einsum over each hop).
Weight normalization applied for training with `apply_weight_norm()` (torch.nn.utils.parametrizations
.weight_norm). Phase 1-2: 3 steps at 16 segments of 32 mel frames (8,192 samples) against random
target waveforms, the loss a multi-resolution STFT loss (spectral convergence + log-magnitude L1 at
FFT sizes 512/1024/2048 with Hann windows, torch.stft return_complex) plus a mel-frame L1 on
frame-averaged magnitudes, AdamW with UnivNet's betas (0.5, 0.9), gradients clipped, fp32 with TF32
matmuls. Phase 3: the parametrizations removed for inference (`parametrize.remove_parametrizations`
with the normalized weight kept), 4 utterances of up to 400 frames padded to 400 with a padding mask,
fixed noise from a seeded generator, under inference_mode, waveform lengths from the mask. Phase 4:
the vocoder cast to fp16 and one 1,600-frame utterance (409,600 samples) synthesized.

Phases: 0 model built; 1 first step; 2 two more steps; 3 padded batch synthesis; 4 fp16 long utterance."""

import os

import torch
import torch.nn.functional as F
from torch.nn.utils import parametrize
from transformers import UnivNetConfig, UnivNetModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3075)
torch.backends.cuda.matmul.allow_tf32 = True
if SMALL:
    config = UnivNetConfig(model_hidden_channels=8)
    B, FRAMES, INFER_B, INFER_FRAMES, LONG = 2, 8, 2, 12, 16
else:
    config = UnivNetConfig(model_hidden_channels=64, kernel_predictor_hidden_channels=64)
    B, FRAMES, INFER_B, INFER_FRAMES, LONG = 16, 32, 4, 400, 1600
HOP = 256
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def stft_mag(x, n_fft):
    window = torch.hann_window(n_fft, device=x.device)
    spec = torch.stft(x, n_fft, hop_length=n_fft // 4, win_length=n_fft, window=window, return_complex=True)
    return spec.abs().clamp_min(1e-7)


def mr_stft_loss(pred, target):
    loss = 0.0
    for n_fft in (512, 1024, 2048):
        p, t = stft_mag(pred, n_fft), stft_mag(target, n_fft)
        sc = torch.linalg.norm(t - p, dim=(-2, -1)) / torch.linalg.norm(t, dim=(-2, -1))
        loss = loss + sc.mean() + F.l1_loss(p.log(), t.log())
    return loss / 3


model = UnivNetModel(config).to(device)
model.apply_weight_norm()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.5, 0.9), weight_decay=0.0)
report("built")

model.train()
for step in range(3):
    mels = torch.randn(B, FRAMES, config.num_mel_bins, device=device) * 2 - 5
    target = torch.randn(B, FRAMES * HOP, device=device).mul_(0.1).tanh_()
    wave = model(input_features=mels).waveforms
    frame_pred = wave.abs().view(B, FRAMES, HOP).mean(-1)
    frame_true = target.abs().view(B, FRAMES, HOP).mean(-1)
    loss = mr_stft_loss(wave, target) + 0.5 * F.l1_loss(frame_pred, frame_true)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    del mels, target, wave, loss, frame_pred, frame_true
    if step == 0:
        report("step0")
report("steps1-2")

del optimizer
for module in model.modules():
    if parametrize.is_parametrized(module, "weight"):
        parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
model.eval()
lengths = [INFER_FRAMES, INFER_FRAMES * 3 // 4, INFER_FRAMES // 2, INFER_FRAMES // 3][:INFER_B]
mels = torch.full((INFER_B, INFER_FRAMES, config.num_mel_bins), -11.5)
mask = torch.zeros(INFER_B, INFER_FRAMES, dtype=torch.bool)
for i, n in enumerate(lengths):
    mels[i, :n] = torch.randn(n, config.num_mel_bins) * 2 - 5
    mask[i, :n] = True
gen = torch.Generator(device=device).manual_seed(7)
with torch.inference_mode():
    out = model(input_features=mels.to(device), padding_mask=mask.to(device), generator=gen)
print(f"waveforms {tuple(out.waveforms.shape)} lengths {out.waveform_lengths.tolist()}")
del out
report("batch")

model.half()
mel = (torch.randn(1, LONG, config.num_mel_bins) * 2 - 5).to(device=device, dtype=torch.float16)
with torch.inference_mode():
    wave = model(input_features=mel).waveforms
peak = wave.float().abs().max()
print(f"long waveform {tuple(wave.shape)} peak {peak.item():.3f}")
report("long")
