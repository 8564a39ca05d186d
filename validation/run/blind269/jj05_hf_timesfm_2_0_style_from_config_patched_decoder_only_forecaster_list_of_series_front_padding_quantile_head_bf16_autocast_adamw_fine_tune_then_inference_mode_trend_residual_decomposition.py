"""Google's TimesFM (the 2.0-500m shape) from config, fine-tuned on a domain's series and then used to
forecast a large batch, as the transformers model card shows: a decoder-only patched forecaster (50
layers of d 1,280, 16 heads of 80 with a learned per-dimension query scaling, MLP 1,280, RMSNorm),
series cut into patches of 32 with an input residual block over (values, padding), per-series
instance normalisation, a frequency embedding, a causal mask merged with the padding mask, and a
residual output block to 128 horizon steps x (mean + 9 quantiles). The forward takes a Python list
of 1-D series (front-padded or truncated to the context length in a host loop of `torch.cat`s).
fp32 weights under bf16 autocast; 5 AdamW steps on 192 series of 2,048 points each (context 2,048:
64 patches) against a 128-step future (MSE plus the pinball losses); then under
`torch.inference_mode()` and bf16 autocast a forecast of 512 series of seeded lengths 300 to 2,048
(host-side lengths, so no value-dependent sizes) with `window_size=25` (each series split by a
moving-average conv1d into trend and residual, doubling the batch) and `truncate_negative`; then 2,048
series of 512 points with `forecast_context_len=512`. 3 phases."""

import random

import torch
from transformers import TimesFmConfig, TimesFmModelForPrediction

torch.manual_seed(2695)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = TimesFmConfig(
    patch_length=32,
    context_length=2048,
    horizon_length=128,
    num_hidden_layers=50,
    hidden_size=1280,
    intermediate_size=1280,
    head_dim=80,
    num_attention_heads=16,
)
model = TimesFmModelForPrediction(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
report("timesfm_built_fp32")

t = torch.arange(2048 + 128, device="cuda", dtype=torch.float32)


def series(n, length):
    period = torch.randint(8, 200, (n, 1), device="cuda").float()
    level = torch.rand(n, 1, device="cuda") * 10
    x = (
        level
        + torch.sin(2 * torch.pi * t[: length + 128] / period)
        + 0.1 * torch.randn(n, length + 128, device="cuda")
    )
    return x[:, :length], x[:, length:]


model.train()
for step in range(5):
    past, future = series(192, 2048)
    freq = torch.randint(0, 3, (192,), device="cuda").tolist()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(past_values=list(past), freq=freq, future_values=future)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(out.loss.item(), 4))
report("fine_tune_bf16_autocast")

del opt, out
rng = random.Random(26950)
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    full, _ = series(512, 2048)
    inputs = [full[i, -rng.randint(300, 2048) :] for i in range(512)]
    out = model(
        past_values=inputs, freq=[rng.randint(0, 2) for _ in inputs], window_size=25, truncate_negative=True
    )
    print(
        "decomposed", tuple(out.mean_predictions.shape), round(out.mean_predictions.float().mean().item(), 3)
    )
    short, _ = series(2048, 512)
    out = model(past_values=list(short), freq=[0] * 2048, forecast_context_len=512)
    print("short", tuple(out.full_predictions.shape), round(out.full_predictions.float().mean().item(), 3))
report("inference_mode_forecasts")
