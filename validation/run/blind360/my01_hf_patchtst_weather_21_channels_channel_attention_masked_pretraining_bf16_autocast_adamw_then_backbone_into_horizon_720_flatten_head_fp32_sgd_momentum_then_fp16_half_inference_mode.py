"""Self-supervised pre-training then long-horizon forecasting with Hugging Face's PatchTST built from a
PatchTSTConfig, on weather-sized data (21 variables, context 512, random init): patches of 12 every 12 (42
patches), 128 wide, 3 encoder layers of 8 heads with `channel_attention=True` (each layer also attends across
the 21 channels at every patch), BatchNorm, std scaling.

PatchTSTForPretraining masks 40% of the patches at random (each channel its own mask) and trains under bf16
`torch.autocast` with AdamW (foreach, weight decay 0.05) and clip_grad_norm_; its `model` (the backbone) is
then loaded into a PatchTSTForPrediction with a horizon of 720 and the flatten head (`pooling_type=None`: all
42 patches x 128 of a channel into one shared linear layer; `share_projection=False` is broken in transformers
5.17, its loop overwrites the pooled embedding), fine-tuned in fp32 (TF32 off) with SGD momentum 0.9 and an
MSE loss; last the forecaster is cast to fp16 with `.half()` and forecasts a batch of 128 windows under
`torch.inference_mode`.

Phases: 0 the pre-training model and optimizer; 1 three masked pre-training steps (batch 64); 2 backbone
transferred, three forecasting steps (batch 32); 3 fp16 forecast at batch 128 with the mean absolute error per
channel. Seeded; no sizes depend on values."""

import os

import torch
from transformers import PatchTSTConfig, PatchTSTForPrediction, PatchTSTForPretraining

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(360_01)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    C, CTX, D, L, B1, B2, B3, HOR = 5, 96, 32, 1, 4, 2, 4, 48
else:
    C, CTX, D, L, B1, B2, B3, HOR = 21, 512, 128, 3, 64, 32, 128, 720
torch.backends.cuda.matmul.allow_tf32 = False

common = dict(
    num_input_channels=C,
    context_length=CTX,
    patch_length=12,
    patch_stride=12,
    d_model=D,
    num_hidden_layers=L,
    num_attention_heads=8 if not SMALL else 2,
    ffn_dim=4 * D,
    channel_attention=True,
    norm_type="batchnorm",
    dropout=0.1,
    attention_dropout=0.0,
    ff_dropout=0.1,
    head_dropout=0.1,
    scaling="std",
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


def window(n, horizon=0):
    t = torch.arange(CTX + horizon, device=device, dtype=torch.float32)
    daily = torch.sin(2 * torch.pi * t / 144)[None, :, None]
    level = torch.randn(n, 1, C, device=device) * 10
    amp = torch.rand(n, 1, C, device=device) * 5
    x = level + amp * daily + torch.randn(n, CTX + horizon, C, device=device)
    return x[:, :CTX], x[:, CTX:]


pre_config = PatchTSTConfig(**common, do_mask_input=True, mask_type="random", random_mask_ratio=0.4)
pretrainer = PatchTSTForPretraining(pre_config).to(device).train()
opt = torch.optim.AdamW(pretrainer.parameters(), lr=1e-3, weight_decay=0.05)
print(f"pre-training parameters: {sum(p.numel() for p in pretrainer.parameters()):,}")
report("phase0 PatchTSTForPretraining, AdamW")

for step in range(3):
    past, _ = window(B1)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        out = pretrainer(past_values=past)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(pretrainer.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"pre-training step {step}: masked mse {out.loss.item():.4f}")
del out, past
report("phase1 masked patch pre-training, bf16 autocast")

backbone = pretrainer.model.state_dict()
del pretrainer, opt
fc_config = PatchTSTConfig(**common, prediction_length=HOR, pooling_type=None, loss="mse")
forecaster = PatchTSTForPrediction(fc_config).to(device)
missing, unexpected = forecaster.model.load_state_dict(backbone, strict=False)
print(f"backbone loaded: {len(missing)} missing, {len(unexpected)} unexpected")
del backbone
forecaster.train()
opt = torch.optim.SGD(forecaster.parameters(), lr=1e-3, momentum=0.9)
for step in range(3):
    past, future = window(B2, HOR)
    out = forecaster(past_values=past, future_values=future)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"forecasting step {step}: mse {out.loss.item():.4f}")
del out, past, future
report("phase2 horizon 720 flatten head, fp32, SGD momentum")

del opt
forecaster = forecaster.half().eval()
past, future = window(B3, HOR)
with torch.inference_mode():
    pred = forecaster(past_values=past.half()).prediction_outputs
    mae = (pred.float() - future).abs().mean(dim=(0, 1))
print(f"forecast {tuple(pred.shape)}, mae per channel {mae.cpu().tolist()[:3]}")
del pred, mae, past, future
report("phase3 fp16 half forecast, inference_mode")
