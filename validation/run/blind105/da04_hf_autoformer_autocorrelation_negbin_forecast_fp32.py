"""Probabilistic demand forecasting with HF transformers Autoformer (series decomposition by moving
averages, FFT auto-correlation attention: torch.fft.rfft/irfft and top-k time-delay aggregation),
negative-binomial output head with mean scaling, lags 1-7, 14 and 28, 3 time features, missing
observations masked; built from a config at 3 encoder and 2 decoder layers, d_model 256, fp32;
AdamW on batches of 256 count series (context 336, horizon 56) for 3 steps, then sampled forecasts
with generate() (100 parallel samples per series) for 48 series; 4 phases."""

import os

import torch
from transformers import AutoformerConfig, AutoformerForPrediction

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10504)
if SMALL:
    CTX, PRED, B, FB, D, ENC, DEC, SAMPLES = 32, 8, 4, 2, 16, 1, 1, 5
else:
    CTX, PRED, B, FB, D, ENC, DEC, SAMPLES = 336, 56, 256, 48, 256, 3, 2, 100
LAGS = [1, 2, 3, 4, 5, 6, 7, 14, 28]
cfg = AutoformerConfig(
    prediction_length=PRED,
    context_length=CTX,
    lags_sequence=LAGS,
    distribution_output="negative_binomial",
    scaling="mean",
    num_time_features=3,
    d_model=D,
    encoder_layers=ENC,
    decoder_layers=DEC,
    encoder_attention_heads=8 if not SMALL else 2,
    decoder_attention_heads=8 if not SMALL else 2,
    encoder_ffn_dim=4 * D,
    decoder_ffn_dim=4 * D,
    moving_average=25,
    autocorrelation_factor=3,
    num_parallel_samples=SAMPLES,
)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = AutoformerForPrediction(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
PAST = CTX + max(LAGS)
TOTAL = PAST + PRED


def batch(n):
    t = torch.arange(TOTAL, device=device, dtype=torch.float32)
    week = torch.sin(2 * torch.pi * t / 7)
    rate = (torch.rand(n, 1, device=device) * 20 + 1) * (1.2 + week) + 0.01 * t
    counts = torch.poisson(rate)
    feats = torch.stack([week, torch.cos(2 * torch.pi * t / 7), t / TOTAL], dim=-1).expand(n, -1, -1)
    observed = (torch.rand(n, PAST, device=device) > 0.05).float()
    return counts, feats, observed


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    counts, feats, observed = batch(B)
    loss = model(
        past_values=counts[:, :PAST],
        past_time_features=feats[:, :PAST],
        past_observed_mask=observed,
        future_values=counts[:, PAST:],
        future_time_features=feats[:, PAST:],
    ).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} nll {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del counts, feats, observed, loss
model.eval()
counts, feats, observed = batch(FB)
with torch.no_grad():
    forecast = model.generate(
        past_values=counts[:, :PAST],
        past_time_features=feats[:, :PAST],
        past_observed_mask=observed,
        future_time_features=feats[:, PAST:],
    ).sequences
    q = torch.quantile(forecast, torch.tensor([0.1, 0.5, 0.9], device=device), dim=1)
    mae = (q[1] - counts[:, PAST:]).abs().mean()
if device == "cuda":
    print(
        f"forecast {tuple(forecast.shape)} mae {mae.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
