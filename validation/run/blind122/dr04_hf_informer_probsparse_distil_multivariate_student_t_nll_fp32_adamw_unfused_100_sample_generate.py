"""HF Informer built from its config for ETTh-style multivariate forecasting (7 series, 336 context
steps plus lags up to 168, 96 predicted steps, 4 time features, the series id as a static categorical
feature, mean scaling): ProbSparse self-attention (sampling factor 5) with distilling convolutions
between its 3 encoder layers, 2 decoder layers of width 512, a Student-t head trained by negative
log-likelihood in fp32 (layer drop off); AdamW (foreach off) with gradient clipping, batch 64, 3
steps; then an evaluation loss under no_grad and a probabilistic forecast by generate with 100 sample
paths per series for 4 series; 6 phases."""

import os

import torch
from transformers import InformerConfig, InformerForPrediction

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12204)
B, CTX, PRED, GEN_B = (4, 48, 12, 2) if SMALL else (64, 336, 96, 4)
LAGS = [1, 2, 3, 4, 5, 6, 7, 24, 48] if SMALL else [1, 2, 3, 4, 5, 6, 7, 24, 48, 72, 96, 168]
device = "cuda" if torch.cuda.is_available() else "cpu"

config = InformerConfig(
    prediction_length=PRED,
    context_length=CTX,
    input_size=7,
    lags_sequence=LAGS,
    num_time_features=4,
    num_static_categorical_features=1,
    cardinality=[321],
    embedding_dimension=[16],
    d_model=64 if SMALL else 512,
    encoder_layers=3,
    decoder_layers=2,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=128 if SMALL else 2048,
    decoder_ffn_dim=128 if SMALL else 2048,
    encoder_layerdrop=0.0,
    decoder_layerdrop=0.0,
    attention_type="prob",
    sampling_factor=5,
    distil=True,
    num_parallel_samples=100,
)
model = InformerForPrediction(config).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-2, foreach=False)
PAST = CTX + max(LAGS)


def window(n):
    past_values = torch.randn(n, PAST, 7, device=device).cumsum(1) * 0.1 + 5
    past_time = torch.randn(n, PAST, 4, device=device)
    past_mask = torch.ones(n, PAST, 7, device=device)
    static_cat = torch.randint(0, 321, (n, 1), device=device)
    future_values = torch.randn(n, PRED, 7, device=device) * 0.1 + 5
    future_time = torch.randn(n, PRED, 4, device=device)
    return past_values, past_time, past_mask, static_cat, future_values, future_time


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    pv, pt, pm, sc, fv, ft = window(B)
    out = model(
        past_values=pv,
        past_time_features=pt,
        past_observed_mask=pm,
        static_categorical_features=sc,
        future_values=fv,
        future_time_features=ft,
    )
    opt.zero_grad(set_to_none=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if device == "cuda":
        print(
            f"step {step} nll {out.loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del pv, pt, pm, sc, fv, ft, out

model.eval()
with torch.no_grad():
    pv, pt, pm, sc, fv, ft = window(B)
    loss = model(
        past_values=pv,
        past_time_features=pt,
        past_observed_mask=pm,
        static_categorical_features=sc,
        future_values=fv,
        future_time_features=ft,
    ).loss
if device == "cuda":
    print(
        f"eval nll {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del pv, pt, pm, sc, fv, ft, loss

with torch.no_grad():
    pv, pt, pm, sc, fv, ft = window(GEN_B)
    forecast = model.generate(
        past_values=pv,
        past_time_features=pt,
        past_observed_mask=pm,
        static_categorical_features=sc,
        future_time_features=ft,
    )
    median = forecast.sequences.median(dim=1).values
    crps_proxy = (forecast.sequences - fv.unsqueeze(1)).abs().mean()
if device == "cuda":
    print(
        f"forecast {tuple(forecast.sequences.shape)} mae {crps_proxy.item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
