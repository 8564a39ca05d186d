"""transformers' PatchTSTForPrediction built from PatchTSTConfig (321 channels as in the Electricity
benchmark, context 512, horizon 96, patches of 16 with stride 8, d_model 128, 16 heads, 3 layers, ffn 256,
std scaling, SDPA attention) trained on random series for 5 steps under bf16 autocast with AdamW and
OneCycleLR at batch 32 (the model folds channels into the batch: 32 x 321 sequences), clip 1.0; no_grad
evaluation of the MSE at batch 64; then (PatchTST and its optimizer deleted, empty_cache()) transformers'
PatchTSMixerForPrediction (mix_channel mode with gated attention, 8 layers of d_model 64, context 512,
horizon 720, patch 16 stride 8) trained 4 steps in fp32 with Adam at batch 24, then inference_mode
forecasts at batch 128. 4 phases."""

import torch
from transformers import (
    PatchTSMixerConfig,
    PatchTSMixerForPrediction,
    PatchTSTConfig,
    PatchTSTForPrediction,
)

torch.manual_seed(2291)
device = "cuda"
C, L = 321, 512


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(b, horizon):
    t = torch.arange(L + horizon, device=device, dtype=torch.float32)
    season = torch.sin(2 * torch.pi * t / 24)[None, :, None]
    x = season + 0.3 * torch.randn(b, L + horizon, C, device=device)
    return x[:, :L].contiguous(), x[:, L:].contiguous()


cfg = PatchTSTConfig(
    num_input_channels=C, context_length=L, prediction_length=96, patch_length=16, patch_stride=8,
    d_model=128, num_attention_heads=16, num_hidden_layers=3, ffn_dim=256, dropout=0.2,
    head_dropout=0.2, scaling="std", loss="mse",
)
model = PatchTSTForPrediction(cfg).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=5, pct_start=0.3)
print("patchtst params", sum(p.numel() for p in model.parameters()))

model.train()
for step in range(5):
    past, future = batch(32, 96)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(past_values=past, future_values=future)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    print("step", step, "loss", out.loss.item())
report("patchtst_train")

model.eval()
with torch.no_grad():
    past, future = batch(64, 96)
    pred = model(past_values=past).prediction_outputs
    mse = torch.mean((pred - future) ** 2)
print("eval mse", mse.item(), tuple(pred.shape))
report("patchtst_eval")

del model, opt, sched, out, pred, past, future
torch.cuda.empty_cache()

mcfg = PatchTSMixerConfig(
    num_input_channels=C, context_length=L, prediction_length=720, patch_length=16, patch_stride=8,
    d_model=64, num_layers=8, expansion_factor=2, dropout=0.1, head_dropout=0.1, mode="mix_channel",
    gated_attn=True, scaling="std", loss="mse",
)
mixer = PatchTSMixerForPrediction(mcfg).to(device)
mopt = torch.optim.Adam(mixer.parameters(), lr=1e-3)
print("patchtsmixer params", sum(p.numel() for p in mixer.parameters()))
mixer.train()
for step in range(4):
    past, future = batch(24, 720)
    out = mixer(past_values=past, future_values=future)
    out.loss.backward()
    mopt.step()
    mopt.zero_grad(set_to_none=True)
    print("mixer step", step, "loss", out.loss.item())
report("patchtsmixer_train")

mixer.eval()
with torch.inference_mode():
    past, future = batch(128, 720)
    pred = mixer(past_values=past).prediction_outputs
    print("mixer eval mse", torch.mean((pred - future) ** 2).item(), tuple(pred.shape))
report("patchtsmixer_infer")
