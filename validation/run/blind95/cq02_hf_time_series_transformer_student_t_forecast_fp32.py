"""HF transformers TimeSeriesTransformer probabilistic forecaster (Student-t output head, mean
scaling, lags 1-7 and 24, 2 time features, a static categorical embedding) built from its config,
4 encoder and 4 decoder layers, d_model 128, fp32; negative log-likelihood training with AdamW on
batches of 512 series (context 168, horizon 48), 3 steps; then sampled forecasts with generate()
(100 parallel Student-t samples per series, drawn on the GPU) for 32 series; 5 phases."""

import os

import torch
from transformers import TimeSeriesTransformerConfig, TimeSeriesTransformerForPrediction

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9502)
if SMALL:
    CTX, PRED, B, FB, D, LAYERS, SAMPLES = 24, 6, 4, 2, 16, 1, 5
else:
    CTX, PRED, B, FB, D, LAYERS, SAMPLES = 168, 48, 512, 32, 128, 4, 100
LAGS = [1, 2, 3, 4, 5, 6, 7, 24]
cfg = TimeSeriesTransformerConfig(
    prediction_length=PRED,
    context_length=CTX,
    lags_sequence=LAGS,
    distribution_output="student_t",
    scaling="mean",
    num_time_features=2,
    num_static_categorical_features=1,
    cardinality=[370],
    embedding_dimension=[8],
    d_model=D,
    encoder_layers=LAYERS,
    decoder_layers=LAYERS,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=4 * D,
    decoder_ffn_dim=4 * D,
    num_parallel_samples=SAMPLES,
)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = TimeSeriesTransformerForPrediction(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
PAST = CTX + max(LAGS)


def batch(n):
    t = torch.arange(PAST + PRED, device=device, dtype=torch.float32)
    phase = torch.rand(n, 1, device=device) * 24
    level = torch.rand(n, 1, device=device) * 50 + 1
    series = level * (1.5 + torch.sin(2 * torch.pi * (t + phase) / 24)) + torch.rand(
        n, PAST + PRED, device=device
    )
    feats = torch.stack([torch.sin(2 * torch.pi * t / 24), t / (PAST + PRED)], dim=-1).expand(n, -1, -1)
    ids = torch.randint(0, 370, (n, 1), device=device)
    return series, feats, ids


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    series, feats, ids = batch(B)
    loss = model(
        past_values=series[:, :PAST],
        past_time_features=feats[:, :PAST],
        past_observed_mask=torch.ones(B, PAST, device=device),
        static_categorical_features=ids,
        future_values=series[:, PAST:],
        future_time_features=feats[:, PAST:],
    ).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del series, feats, ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
series, feats, ids = batch(FB)
with torch.no_grad():
    forecast = model.generate(
        past_values=series[:, :PAST],
        past_time_features=feats[:, :PAST],
        past_observed_mask=torch.ones(FB, PAST, device=device),
        static_categorical_features=ids,
        future_time_features=feats[:, PAST:],
    ).sequences
    median = forecast.median(dim=1).values
    mae = (median - series[:, PAST:]).abs().mean()
if device == "cuda":
    print(
        f"forecast {tuple(forecast.shape)} mae {mae.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
