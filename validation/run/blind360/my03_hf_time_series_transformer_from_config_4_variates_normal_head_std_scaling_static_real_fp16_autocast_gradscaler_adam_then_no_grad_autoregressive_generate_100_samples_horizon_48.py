"""Multivariate probabilistic forecasting with Hugging Face's Time Series Transformer (the vanilla
encoder-decoder forecaster) built from a TimeSeriesTransformerConfig, random init: 4 variates per series (a
small power plant: output, temperature, humidity, pressure), an independent Normal head
(`distribution_output="normal"`), std scaling, lags 1-4, 24 and 168, 3 time features (hour, weekday, an age
feature), 2 static real features; context 168, horizon 48, d_model 96, 3 encoder and 3 decoder layers of 4
heads.

Training runs under fp16 `torch.autocast` with a `torch.amp.GradScaler` (scale, unscale_, clip_grad_norm_,
step, update) and Adam (foreach); the forecast is the model's own `generate()`: the encoder once, then 48
decoder passes, each over the whole sequence so far for 100 parallel sample paths per series, drawing from the
Normal head at every step, in fp32 under `torch.no_grad`.

Phases: 0 model, optimizer and scaler; 1 three fp16 autocast steps at batch 128; 2 three more steps at batch
256; 3 generate at batch 24 (2400 sample paths), with the quantiles and CRPS-like error on the GPU. Seeded; no
sizes depend on values."""

import os

import torch
from transformers import TimeSeriesTransformerConfig, TimeSeriesTransformerForPrediction

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(360_03)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    V, CTX, HOR, D, B1, B2, B3, SAMPLES = 2, 24, 6, 16, 4, 8, 2, 5
    LAGS = [1, 2, 24]
else:
    V, CTX, HOR, D, B1, B2, B3, SAMPLES = 4, 168, 48, 96, 128, 256, 24, 100
    LAGS = [1, 2, 3, 4, 24, 168]
PAST = CTX + max(LAGS)
TOTAL = PAST + HOR

config = TimeSeriesTransformerConfig(
    prediction_length=HOR,
    context_length=CTX,
    input_size=V,
    lags_sequence=LAGS,
    distribution_output="normal",
    scaling="std",
    num_time_features=3,
    num_static_real_features=2,
    d_model=D,
    encoder_layers=3 if not SMALL else 1,
    decoder_layers=3 if not SMALL else 1,
    encoder_attention_heads=4 if not SMALL else 2,
    decoder_attention_heads=4 if not SMALL else 2,
    encoder_ffn_dim=4 * D,
    decoder_ffn_dim=4 * D,
    dropout=0.1,
    num_parallel_samples=SAMPLES,
)


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


def batch(n):
    t = torch.arange(TOTAL, device=device, dtype=torch.float32)
    hour = torch.sin(2 * torch.pi * (t % 24) / 24)
    weekday = (t // 24 % 7) / 6.0 - 0.5
    age = torch.log1p(t) / torch.log1p(t[-1])
    feats = torch.stack([hour, weekday, age], dim=-1).expand(n, -1, -1)
    base = torch.randn(n, 1, V, device=device) * 3 + 10
    values = base + 2 * hour[None, :, None] + torch.randn(n, TOTAL, V, device=device) * 0.5
    return dict(
        past_values=values[:, :PAST],
        past_time_features=feats[:, :PAST],
        past_observed_mask=torch.ones(n, PAST, V, device=device),
        static_real_features=torch.rand(n, 2, device=device),
        future_time_features=feats[:, PAST:],
    ), values[:, PAST:]


model = TimeSeriesTransformerForPrediction(config).to(device)
opt = torch.optim.Adam(model.parameters(), lr=5e-4)
scaler = torch.amp.GradScaler(device, enabled=cuda)
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 TimeSeriesTransformerForPrediction, Adam, GradScaler")


def train_steps(n, steps=3):
    model.train()
    for step in range(steps):
        inputs, future = batch(n)
        with torch.autocast(device, dtype=torch.float16, enabled=cuda):
            loss = model(**inputs, future_values=future).loss
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        print(f"batch {n} step {step}: nll {loss.item():.4f}")


train_steps(B1)
report("phase1 fp16 autocast + GradScaler, batch 128")
train_steps(B2)
report("phase2 fp16 autocast + GradScaler, batch 256")

model.eval()
inputs, future = batch(B3)
with torch.no_grad():
    samples = model.generate(**inputs).sequences
    q = torch.quantile(samples, torch.tensor([0.1, 0.5, 0.9], device=device), dim=1)
    spread = (samples - future[:, None]).abs().mean() - 0.5 * (
        samples[:, : SAMPLES // 2] - samples[:, SAMPLES // 2 : 2 * (SAMPLES // 2)]
    ).abs().mean()
print(
    f"samples {tuple(samples.shape)}, median mae {(q[1] - future).abs().mean().item():.3f}, "
    f"crps {spread.item():.3f}"
)
del samples, q, spread, inputs, future
report("phase3 autoregressive generate, 100 samples, horizon 48")
