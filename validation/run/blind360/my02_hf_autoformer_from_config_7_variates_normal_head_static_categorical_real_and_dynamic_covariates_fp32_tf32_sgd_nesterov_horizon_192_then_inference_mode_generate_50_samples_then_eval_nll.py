"""Multivariate probabilistic forecasting with Hugging Face's Autoformer built from an AutoformerConfig
(random init): 7 variates per series (ETT-like: oil temperature and six loads), an independent Normal output
head (`distribution_output="normal"`, one location and scale per variate), mean scaling, lags 1-7, 24, 48 and
168, 4 time features, 1 dynamic real covariate known in the future, a static categorical feature (the station,
cardinality 40, embedding 8) and 2 static real features; context 336, horizon 192, d_model 128, 2 encoder and
1 decoder layers with FFT auto-correlation (torch.fft.rfft / irfft, top-k delays) and moving-average series
decomposition (kernel 25). fp32 with TF32 matmuls (Autoformer's rfft has no bf16 kernel in cuFFT, so no
autocast), SGD with Nesterov momentum and clip_grad_norm_.

Phases: 0 model and optimizer; 1 three training steps at batch 64 (NLL, a few observations missing); 2
`generate()` under `torch.inference_mode` at batch 16 with 50 parallel samples, the median and a 10-90% band;
3 the NLL of 128 held-out windows in eval mode under `torch.no_grad`. Seeded; no sizes depend on values."""

import os

import torch
from transformers import AutoformerConfig, AutoformerForPrediction

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(360_02)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    V, CTX, HOR, D, B1, B2, B3, SAMPLES = 3, 48, 16, 16, 4, 2, 4, 5
    LAGS = [1, 2, 3, 24]
else:
    V, CTX, HOR, D, B1, B2, B3, SAMPLES = 7, 336, 192, 128, 64, 16, 128, 50
    LAGS = [1, 2, 3, 4, 5, 6, 7, 24, 48, 168]
torch.backends.cuda.matmul.allow_tf32 = True
PAST = CTX + max(LAGS)
TOTAL = PAST + HOR
STATIONS = 40

config = AutoformerConfig(
    prediction_length=HOR,
    context_length=CTX,
    input_size=V,
    lags_sequence=LAGS,
    distribution_output="normal",
    scaling="mean",
    num_time_features=4,
    num_dynamic_real_features=1,
    num_static_categorical_features=1,
    cardinality=[STATIONS],
    embedding_dimension=[8],
    num_static_real_features=2,
    d_model=D,
    encoder_layers=2 if not SMALL else 1,
    decoder_layers=1,
    encoder_attention_heads=8 if not SMALL else 2,
    decoder_attention_heads=8 if not SMALL else 2,
    encoder_ffn_dim=4 * D,
    decoder_ffn_dim=4 * D,
    label_length=48 if not SMALL else 8,
    moving_average=25,
    autocorrelation_factor=3,
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
    hour = 2 * torch.pi * (t % 24) / 24
    week = 2 * torch.pi * (t % 168) / 168
    time_feats = torch.stack([hour.sin(), hour.cos(), week.sin(), week.cos()], dim=-1)
    load = 1.0 + 0.5 * torch.rand(n, TOTAL, 1, device=device)
    time_feats = torch.cat([time_feats.expand(n, -1, -1), load], dim=-1)
    base = torch.rand(n, 1, V, device=device) * 20 + 5
    values = base * (1.3 + hour.sin()[None, :, None] * 0.3) + torch.randn(n, TOTAL, V, device=device)
    observed = (torch.rand(n, PAST, V, device=device) > 0.02).float()
    return dict(
        past_values=values[:, :PAST] * observed,
        past_time_features=time_feats[:, :PAST],
        past_observed_mask=observed,
        static_categorical_features=torch.randint(0, STATIONS, (n, 1), device=device),
        static_real_features=torch.rand(n, 2, device=device),
        future_time_features=time_feats[:, PAST:],
    ), values[:, PAST:]


model = AutoformerForPrediction(config).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, nesterov=True)
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 AutoformerForPrediction, SGD nesterov")

model.train()
for step in range(3):
    inputs, future = batch(B1)
    loss = model(**inputs, future_values=future).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step}: nll {loss.item():.4f}")
del inputs, future, loss
report("phase1 training, fp32 TF32, horizon 192")

model.eval()
inputs, future = batch(B2)
with torch.inference_mode():
    samples = model.generate(**inputs).sequences
    q = torch.quantile(samples, torch.tensor([0.1, 0.5, 0.9], device=device), dim=1)
    mae = (q[1] - future).abs().mean()
print(f"samples {tuple(samples.shape)}, median mae {mae.item():.3f}")
del samples, q, mae, inputs, future
report("phase2 generate, 50 parallel samples, inference_mode")

inputs, future = batch(B3)
with torch.no_grad():
    nll = model(**inputs, future_values=future).loss
print(f"held-out nll {nll.item():.4f}")
del inputs, future, nll
report("phase3 held-out NLL, no_grad")
