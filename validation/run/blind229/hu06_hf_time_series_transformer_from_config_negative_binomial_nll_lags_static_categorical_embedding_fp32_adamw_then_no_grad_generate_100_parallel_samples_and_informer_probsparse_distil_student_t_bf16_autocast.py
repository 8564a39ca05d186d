"""transformers' probabilistic forecasters built from their configs on random retail-like counts.

TimeSeriesTransformerForPrediction (input_size 1, context 168, horizon 48, lags 1-7, 24, 48 and 168 so the
past window is 336 steps, 4 time features, an age feature, a static categorical store-item id of
cardinality 3,049 embedded in 16, d_model 128, 4 + 4 layers, 8 heads, ffn 512, mean scaling, a negative-
binomial distribution head, layerdrop 0) trained 5 steps with its NLL loss (past_observed_mask with a few
missing values, future_observed_mask) by AdamW in fp32 at batch 256, clip 1.0; no_grad generate() at batch
24 with 100 parallel samples (2,400 sequences, the decoder re-run over the growing 48-step horizon); then
InformerForPrediction (input_size 7, context 336, horizon 96, lags 1-7, ProbSparse attention with factor 5,
distilling convolutions, 3 + 2 layers of d_model 256, 8 heads, ffn 1024, Student-t head) trained 4 steps
under bf16 autocast with Adam at batch 256, and its no_grad generate() at batch 64 with 20 samples. 4
phases."""

import torch
from transformers import (
    InformerConfig,
    InformerForPrediction,
    TimeSeriesTransformerConfig,
    TimeSeriesTransformerForPrediction,
)

torch.manual_seed(2296)
device = "cuda"


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def make_batch(cfg, b, counts):
    past_len = cfg.context_length + max(cfg.lags_sequence)
    shape = (b, past_len) if cfg.input_size == 1 else (b, past_len, cfg.input_size)
    fshape = (b, cfg.prediction_length) if cfg.input_size == 1 else (b, cfg.prediction_length, cfg.input_size)
    if counts:
        past = torch.poisson(torch.full(shape, 3.0, device=device))
        future = torch.poisson(torch.full(fshape, 3.0, device=device))
    else:
        past = torch.randn(shape, device=device).cumsum(1) * 0.1
        future = torch.randn(fshape, device=device)
    nf = cfg.num_time_features
    return dict(
        past_values=past,
        past_time_features=torch.rand(b, past_len, nf, device=device),
        past_observed_mask=(torch.rand(shape, device=device) > 0.02).float(),
        static_categorical_features=torch.randint(0, 3049, (b, 1), device=device)
        if cfg.num_static_categorical_features else None,
        future_values=future,
        future_time_features=torch.rand(b, cfg.prediction_length, nf, device=device),
        future_observed_mask=torch.ones(fshape, device=device),
    )


cfg = TimeSeriesTransformerConfig(
    prediction_length=48, context_length=168, distribution_output="negative_binomial", input_size=1,
    lags_sequence=[1, 2, 3, 4, 5, 6, 7, 24, 48, 168], scaling="mean", num_time_features=5,
    num_static_categorical_features=1, cardinality=[3049], embedding_dimension=[16], d_model=128,
    encoder_layers=4, decoder_layers=4, encoder_attention_heads=8, decoder_attention_heads=8,
    encoder_ffn_dim=512, decoder_ffn_dim=512, dropout=0.1, encoder_layerdrop=0.0, decoder_layerdrop=0.0,
    num_parallel_samples=100,
)
model = TimeSeriesTransformerForPrediction(cfg).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=1e-1)
print("tst params", sum(p.numel() for p in model.parameters()))
model.train()
for step in range(5):
    out = model(**make_batch(cfg, 256, True))
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("tst step", step, out.loss.item())
report("tst_train")

model.eval()
with torch.no_grad():
    b = make_batch(cfg, 24, True)
    b.pop("future_values"), b.pop("future_observed_mask")
    samples = model.generate(**b).sequences
    print("tst samples", tuple(samples.shape), samples.median(dim=1).values.mean().item())
report("tst_generate")

del model, opt, out, samples, b
torch.cuda.empty_cache()

icfg = InformerConfig(
    prediction_length=96, context_length=336, input_size=7, lags_sequence=[1, 2, 3, 4, 5, 6, 7],
    distribution_output="student_t", scaling="std", num_time_features=4, d_model=256, encoder_layers=3,
    decoder_layers=2, encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=1024,
    decoder_ffn_dim=1024, attention_type="prob", sampling_factor=5, distil=True, dropout=0.05,
    encoder_layerdrop=0.0, decoder_layerdrop=0.0, num_parallel_samples=20,
)
inf = InformerForPrediction(icfg).to(device)
iopt = torch.optim.Adam(inf.parameters(), lr=1e-4)
print("informer params", sum(p.numel() for p in inf.parameters()))
inf.train()
for step in range(4):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = inf(**make_batch(icfg, 256, False))
    out.loss.backward()
    iopt.step()
    iopt.zero_grad(set_to_none=True)
    print("informer step", step, out.loss.item())
report("informer_train_bf16")

inf.eval()
with torch.no_grad():
    b = make_batch(icfg, 64, False)
    b.pop("future_values"), b.pop("future_observed_mask")
    samples = inf.generate(**b).sequences
    print("informer samples", tuple(samples.shape), samples.mean().item())
report("informer_generate")
