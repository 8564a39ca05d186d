"""DiffWave (Kong et al. 2021, "DiffWave: A Versatile Diffusion Model for Audio Synthesis") as in the
lmnt-com/diffwave reference code: a mel-conditioned neural vocoder trained as a DDPM on raw audio.
30 residual layers of 64 channels with dilated ``Conv1d`` (dilation 2^(i mod 10)), a gated tanh x sigmoid
unit, 1x1 convs for the diffusion-step projection, the conditioner and the residual/skip split, skips summed
and divided by sqrt(30); a sinusoidal diffusion-step embedding table (``register_buffer(...,
persistent=False)``) indexed by the integer step and two SiLU linears; the spectrogram upsampled 256x by
two ``ConvTranspose2d(1, 1, [3, 32], stride=[1, 16], padding=[1, 8])`` with leaky ReLU 0.4. Training
follows the reference learner: random t per clip, noisy audio from the cumulative noise level, L1 loss on
the noise, fp16 autocast with ``GradScaler`` (scale, unscale_, ``clip_grad_norm_(..., 1e9)`` as the grad
norm probe, step, update), Adam 2e-4, and an EMA of the weights kept with
``torch.optim.swa_utils.AveragedModel(..., multi_avg_fn=get_ema_multi_avg_fn(0.999))``.

Phases: 0 model, EMA wrapper and 64 clips of 64 mel frames + audio; 1 fp16 autocast training with
GradScaler and EMA updates; 2 the reference's fast 6-step inference schedule (aligned steps computed in
Python) from the EMA model under inference_mode, 4 clips of 320 frames (81,920 samples) in fp32; 3 the
full 50-step reverse process under no_grad with bf16 autocast on 2 clips of 160 frames; 4 validation
L1 loss at 10 fixed diffusion steps under no_grad in fp32."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def Conv1d(*args, **kwargs):
    layer = nn.Conv1d(*args, **kwargs)
    nn.init.kaiming_normal_(layer.weight)
    return layer


class DiffusionEmbedding(nn.Module):
    def __init__(self, max_steps):
        super().__init__()
        self.register_buffer("embedding", self._build_embedding(max_steps), persistent=False)
        self.projection1 = nn.Linear(128, 512)
        self.projection2 = nn.Linear(512, 512)

    def forward(self, diffusion_step):
        x = self.embedding[diffusion_step]
        x = self.projection1(x)
        x = F.silu(x)
        x = self.projection2(x)
        x = F.silu(x)
        return x

    def _build_embedding(self, max_steps):
        steps = torch.arange(max_steps).unsqueeze(1)
        dims = torch.arange(64).unsqueeze(0)
        table = steps * 10.0 ** (dims * 4.0 / 63.0)
        return torch.cat([torch.sin(table), torch.cos(table)], dim=1)


class SpectrogramUpsampler(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.ConvTranspose2d(1, 1, [3, 32], stride=[1, 16], padding=[1, 8])
        self.conv2 = nn.ConvTranspose2d(1, 1, [3, 32], stride=[1, 16], padding=[1, 8])

    def forward(self, x):
        x = torch.unsqueeze(x, 1)
        x = self.conv1(x)
        x = F.leaky_relu(x, 0.4)
        x = self.conv2(x)
        x = F.leaky_relu(x, 0.4)
        return torch.squeeze(x, 1)


class ResidualBlock(nn.Module):
    def __init__(self, n_mels, residual_channels, dilation):
        super().__init__()
        self.dilated_conv = Conv1d(
            residual_channels, 2 * residual_channels, 3, padding=dilation, dilation=dilation
        )
        self.diffusion_projection = nn.Linear(512, residual_channels)
        self.conditioner_projection = Conv1d(n_mels, 2 * residual_channels, 1)
        self.output_projection = Conv1d(residual_channels, 2 * residual_channels, 1)

    def forward(self, x, diffusion_step, conditioner):
        diffusion_step = self.diffusion_projection(diffusion_step).unsqueeze(-1)
        y = x + diffusion_step
        conditioner = self.conditioner_projection(conditioner)
        y = self.dilated_conv(y) + conditioner
        gate, filter_ = torch.chunk(y, 2, dim=1)
        y = torch.sigmoid(gate) * torch.tanh(filter_)
        y = self.output_projection(y)
        residual, skip = torch.chunk(y, 2, dim=1)
        return (x + residual) / math.sqrt(2.0), skip


class DiffWave(nn.Module):
    def __init__(
        self, n_mels=80, residual_channels=64, residual_layers=30, dilation_cycle_length=10, steps=50
    ):
        super().__init__()
        self.input_projection = Conv1d(1, residual_channels, 1)
        self.diffusion_embedding = DiffusionEmbedding(steps)
        self.spectrogram_upsampler = SpectrogramUpsampler()
        self.residual_layers = nn.ModuleList(
            [
                ResidualBlock(n_mels, residual_channels, 2 ** (i % dilation_cycle_length))
                for i in range(residual_layers)
            ]
        )
        self.skip_projection = Conv1d(residual_channels, residual_channels, 1)
        self.output_projection = Conv1d(residual_channels, 1, 1)
        nn.init.zeros_(self.output_projection.weight)

    def forward(self, audio, diffusion_step, spectrogram):
        x = audio.unsqueeze(1)
        x = self.input_projection(x)
        x = F.relu(x)
        diffusion_step = self.diffusion_embedding(diffusion_step)
        spectrogram = self.spectrogram_upsampler(spectrogram)
        skip = None
        for layer in self.residual_layers:
            x, skip_connection = layer(x, diffusion_step, spectrogram)
            skip = skip_connection if skip is None else skip_connection + skip
        x = skip / math.sqrt(len(self.residual_layers))
        x = self.skip_projection(x)
        x = F.relu(x)
        x = self.output_projection(x)
        return x


hop, n_mels, crop_frames = 256, 80, 64
train_beta = [1e-4 + (0.05 - 1e-4) * i / 49 for i in range(50)]
noise_level_list = []
acc = 1.0
for b in train_beta:
    acc *= 1.0 - b
    noise_level_list.append(acc)
noise_level = torch.tensor(noise_level_list, device=device, dtype=torch.float32)

spectrograms = torch.randn(64, n_mels, crop_frames, device=device) * 0.5 - 4.0
audios = (torch.rand(64, crop_frames * hop, device=device) * 2 - 1) * 0.3

model = DiffWave(n_mels=n_mels, steps=len(train_beta)).to(device)
ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**10)
loss_fn = nn.L1Loss()
report("diffwave, averagedmodel ema and clips")

model.train()
for step in range(10):
    idx = torch.randint(0, audios.shape[0], (8,), device=device)
    audio, spectrogram = audios[idx], spectrograms[idx]
    optimizer.zero_grad()
    N, T = audio.shape
    with torch.autocast("cuda", dtype=torch.float16):
        t = torch.randint(0, len(train_beta), [N], device=audio.device)
        noise_scale = noise_level[t].unsqueeze(1)
        noise_scale_sqrt = noise_scale**0.5
        noise = torch.randn_like(audio)
        noisy_audio = noise_scale_sqrt * audio + (1.0 - noise_scale) ** 0.5 * noise
        predicted = model(noisy_audio, t, spectrogram)
        loss = loss_fn(noise, predicted.squeeze(1))
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1e9)
    scaler.step(optimizer)
    scaler.update()
    ema_model.update_parameters(model)
    if step % 3 == 0:
        print(f"step {step} loss {loss.item():.4f} grad_norm {grad_norm.item():.3f}")
del audio, spectrogram, noise, noisy_audio, predicted, loss, grad_norm
report("fp16 autocast gradscaler training with averagedmodel ema")


def predict(net, spectrogram, inference_noise_schedule, autocast_dtype=None):
    """The reference's inference: the fast schedule is aligned to the training steps in Python floats."""
    training_noise_schedule = train_beta
    talpha = [1 - b for b in training_noise_schedule]
    talpha_cum = []
    acc = 1.0
    for a in talpha:
        acc *= a
        talpha_cum.append(acc)
    beta = inference_noise_schedule
    alpha = [1 - b for b in beta]
    alpha_cum = []
    acc = 1.0
    for a in alpha:
        acc *= a
        alpha_cum.append(acc)
    T = []
    for s in range(len(inference_noise_schedule)):
        for t in range(len(training_noise_schedule) - 1):
            if talpha_cum[t + 1] <= alpha_cum[s] <= talpha_cum[t]:
                twiddle = (talpha_cum[t] ** 0.5 - alpha_cum[s] ** 0.5) / (
                    talpha_cum[t] ** 0.5 - talpha_cum[t + 1] ** 0.5
                )
                T.append(t + twiddle)
                break
    T = [round(x) for x in T]
    audio = torch.randn(spectrogram.shape[0], hop * spectrogram.shape[-1], device=spectrogram.device)
    for n in range(len(alpha) - 1, -1, -1):
        c1 = 1 / alpha[n] ** 0.5
        c2 = beta[n] / (1 - alpha_cum[n]) ** 0.5
        step = torch.tensor([T[n]], device=audio.device)
        with torch.autocast(
            "cuda", dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None
        ):
            eps = net(audio, step, spectrogram).squeeze(1)
        audio = c1 * (audio - c2 * eps.float())
        if n > 0:
            noise = torch.randn_like(audio)
            sigma = ((1.0 - alpha_cum[n - 1]) / (1.0 - alpha_cum[n]) * beta[n]) ** 0.5
            audio += sigma * noise
        audio = torch.clamp(audio, -1.0, 1.0)
    return audio


ema_net = ema_model.module.eval()
with torch.inference_mode():
    mel = torch.randn(4, n_mels, 320, device=device) * 0.5 - 4.0
    fast = predict(ema_net, mel, [0.0001, 0.001, 0.01, 0.05, 0.2, 0.5])
    print("fast sampling", tuple(fast.shape), "rms", fast.pow(2).mean().sqrt().item())
report("fast 6-step sampling from ema under inference_mode fp32")

with torch.no_grad():
    mel = torch.randn(2, n_mels, 160, device=device) * 0.5 - 4.0
    full = predict(ema_net, mel, train_beta, autocast_dtype=torch.bfloat16)
    print("full sampling", tuple(full.shape), "rms", full.pow(2).mean().sqrt().item())
report("full 50-step sampling bf16 autocast under no_grad")

val_losses = []
with torch.no_grad():
    audio, spectrogram = audios[:16], spectrograms[:16]
    for t_fixed in range(0, 50, 5):
        t = torch.full((16,), t_fixed, device=device, dtype=torch.long)
        noise_scale = noise_level[t].unsqueeze(1)
        noise = torch.randn_like(audio)
        noisy_audio = noise_scale**0.5 * audio + (1.0 - noise_scale) ** 0.5 * noise
        val_losses.append(loss_fn(noise, ema_net(noisy_audio, t, spectrogram).squeeze(1)))
    print("validation L1 per step", [round(v, 4) for v in torch.stack(val_losses).tolist()])
report("validation l1 at fixed steps fp32 no_grad")
