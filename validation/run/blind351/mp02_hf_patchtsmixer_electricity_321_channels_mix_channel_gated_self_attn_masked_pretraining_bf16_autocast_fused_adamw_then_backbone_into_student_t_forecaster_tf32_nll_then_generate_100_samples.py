"""Self-supervised pre-training then probabilistic forecasting with Hugging Face's PatchTSMixer built from a
PatchTSMixerConfig, on electricity-sized data (321 clients, context 512, patches of 16 every 8: 63 patches; 64
wide, 8 mixer layers with expansion 2, `mode="mix_channel"` so every layer also mixes across the 321
channels, gated attention and a 4-head self-attention branch over patches; std scaling; random init).

PatchTSMixerForPretraining with random patch masking (40% of the patches, the same across channels) trains
under bf16 `torch.autocast` with a fused AdamW; its backbone (`model.model`) is then loaded into a
PatchTSMixerForPrediction with a Student-t distribution head (horizon 96, negative log-likelihood loss),
fine-tuned in fp32 with TF32 matmuls and Adam (a foreach step), and last `generate()` draws 100 sample
paths per series (the distribution's `sample()` 100 times and a `torch.stack`), reduced to the median and
a 10-90% band on the GPU.

Phases: 0 the pre-training model and optimizer; 1 three masked pre-training steps (batch 8); 2 backbone
transferred, three forecasting steps (batch 8); 3 generate at batch 16, 100 samples. Seeded; no sizes
depend on values."""

import os

import torch
from transformers import PatchTSMixerConfig, PatchTSMixerForPrediction, PatchTSMixerForPretraining

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(351_02)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    C, CTX, D, L, B, BG, HOR = 12, 64, 16, 2, 4, 2, 16
else:
    C, CTX, D, L, B, BG, HOR = 321, 512, 64, 8, 8, 16, 96
torch.backends.cuda.matmul.allow_tf32 = False

common = dict(
    context_length=CTX,
    patch_length=16,
    patch_stride=8,
    num_input_channels=C,
    d_model=D,
    num_layers=L,
    expansion_factor=2,
    dropout=0.1,
    head_dropout=0.1,
    mode="mix_channel",
    gated_attn=True,
    self_attn=True,
    self_attn_heads=4,
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


pre_config = PatchTSMixerConfig(
    **common, mask_type="random", random_mask_ratio=0.4, channel_consistent_masking=True, masked_loss=True
)
pretrainer = PatchTSMixerForPretraining(pre_config).to(device).train()
opt = torch.optim.AdamW(pretrainer.parameters(), lr=1e-3, weight_decay=1e-4, fused=cuda)
print(f"pre-training parameters: {sum(p.numel() for p in pretrainer.parameters()):,}")
report("phase0 PatchTSMixerForPretraining, fused AdamW")


def window(n, horizon=0):
    t = torch.arange(CTX + horizon, device=device, dtype=torch.float32)
    daily = torch.sin(2 * torch.pi * t / 24)[None, :, None]
    level = torch.rand(n, 1, C, device=device) * 100
    x = level * (1.5 + daily) + torch.randn(n, CTX + horizon, C, device=device) * 5
    return x[:, :CTX], x[:, CTX:]


for step in range(3):
    past, _ = window(B)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        out = pretrainer(past_values=past, return_loss=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(pretrainer.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"pre-training step {step}: loss {out.loss.item():.4f}")
del out, past
report("phase1 masked pre-training, bf16 autocast")

backbone = pretrainer.model.state_dict()
del pretrainer, opt
torch.backends.cuda.matmul.allow_tf32 = True
fc_config = PatchTSMixerConfig(
    **common, prediction_length=HOR, distribution_output="student_t", loss="nll", num_parallel_samples=100
)
forecaster = PatchTSMixerForPrediction(fc_config).to(device)
missing, unexpected = forecaster.model.load_state_dict(backbone, strict=False)
print(f"backbone loaded: {len(missing)} missing, {len(unexpected)} unexpected")
del backbone
forecaster.train()
opt = torch.optim.Adam(forecaster.parameters(), lr=1e-4)
for step in range(3):
    past, future = window(B, HOR)
    out = forecaster(past_values=past, future_values=future, return_loss=True)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"forecasting step {step}: nll {out.loss.item():.4f}")
del out, past, future
report("phase2 backbone transferred, Student-t NLL fine-tune, fp32 TF32, Adam")

forecaster.eval()
past, _ = window(BG)
samples = forecaster.generate(past_values=past).sequences
q = torch.quantile(samples[:, :, :, :8], torch.tensor([0.1, 0.5, 0.9], device=device), dim=1)
print(f"samples {tuple(samples.shape)}, quantiles {tuple(q.shape)}")
del samples, q, past
report("phase3 generate, 100 sample paths")
