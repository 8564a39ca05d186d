"""Fine-tuning and forecasting with Hugging Face's TimesFm2_5ModelForPrediction built from a
TimesFm2_5Config at the 200M checkpoint's sizes (20 decoder layers, 1,280 wide, 16 heads of 80, rotary
positions, patches of 32, horizon 128, a 1,024-long continuous quantile head, 9 quantiles; random init), the
way its model card feeds it: `past_values` is a Python list of 1-D series of different lengths, which the
model pads at the front to the forecast context, normalises patch by patch with running statistics and,
with `force_flip_invariance` (its default), runs the decoder twice (on the series and on its negation) and
averages.

Fine-tuning passes `future_values` (the model's own loss: MSE of the median plus the quantile loss, in the
normalised space) under bf16 `torch.autocast` with `torch.optim.Adafactor`; then with every decoder layer
wrapped in `torch.utils.checkpoint` by hand (the model refuses `gradient_checkpointing_enable()`),
`force_flip_invariance=False` and a longer context; last the model in bf16 forecasts a large batch under
`inference_mode` (with flip invariance, negative forecasts clamped to zero where a series has no negative
value).

Phases: 0 model (fp32) and Adafactor; 1 three steps, 64 series, context 1,024; 2 two steps, checkpointing,
no flip, 96 series, context 2,048; 3 bf16 forecast of 256 series, context 2,048. Seeded; lengths fixed."""

import os

import torch
from torch.utils.checkpoint import checkpoint
from transformers import TimesFm2_5Config, TimesFm2_5ModelForPrediction

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(351_04)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = TimesFm2_5Config(
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=64,
        head_dim=16,
        num_attention_heads=4,
        num_key_value_heads=4,
        output_quantile_len=64,
        horizon_length=32,
        context_length=256,
        max_position_embeddings=256,
    )
    B1, CTX1, B2, CTX2, B3 = 4, 128, 6, 256, 8
else:
    config = TimesFm2_5Config(context_length=16384)
    B1, CTX1, B2, CTX2, B3 = 64, 1024, 96, 2048, 256
config._attn_implementation = "sdpa"
HOR = config.horizon_length


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


model = TimesFm2_5ModelForPrediction(config).to(device)
model.train()
optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-4)
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 TimesFM-2.5 fp32, Adafactor")


def series(n, ctx):
    """n series whose lengths step from a quarter of the context to 1.25 contexts (longer ones are cut)."""
    past, future = [], []
    for i in range(n):
        length = ctx // 4 + (i * ctx) // n
        t = torch.arange(length + HOR, device=device, dtype=torch.float32)
        x = 10 + 3 * torch.sin(2 * torch.pi * t / (24 + i % 7)) + torch.randn(length + HOR, device=device)
        past.append(x[:length])
        future.append(x[length:])
    return past, torch.stack(future)


def step(n, ctx, **kwargs):
    past, future = series(n, ctx)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        out = model(past_values=past, future_values=future, forecast_context_len=ctx, **kwargs)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return out.loss.item()


for i in range(3):
    print(f"step {i}: loss {step(B1, CTX1):.4f}")
report(f"phase1 three fine-tuning steps, {B1} series, context {CTX1}, flip invariance")


# TimesFm2_5ModelForPrediction refuses gradient_checkpointing_enable(): wrap each decoder layer by hand
class Checkpointed(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, hidden_states, **kwargs):
        return checkpoint(self.layer, hidden_states, use_reentrant=False, **kwargs)


plain_layers = model.model.layers
model.model.layers = torch.nn.ModuleList(Checkpointed(layer) for layer in plain_layers)
for i in range(2):
    print(f"checkpointed step {i}: loss {step(B2, CTX2, force_flip_invariance=False):.4f}")
report(f"phase2 two steps, checkpointing, no flip, {B2} series, context {CTX2}")

optimizer = None  # Adafactor's state freed before the bf16 cast
model.model.layers = plain_layers
model.to(torch.bfloat16 if cuda else torch.float32).eval()
past, _ = series(B3, CTX2)
past = [p.to(model.dtype) for p in past]
with torch.inference_mode():
    out = model(past_values=past, forecast_context_len=CTX2)
    point = out.mean_predictions.float().cpu()
    bands = out.full_predictions[..., [1, 9]].float().cpu()
print(f"forecasts {tuple(point.shape)}, 10-90% bands {tuple(bands.shape)}")
del out, past
report(f"phase3 bf16 forecast, {B3} series, context {CTX2}")
