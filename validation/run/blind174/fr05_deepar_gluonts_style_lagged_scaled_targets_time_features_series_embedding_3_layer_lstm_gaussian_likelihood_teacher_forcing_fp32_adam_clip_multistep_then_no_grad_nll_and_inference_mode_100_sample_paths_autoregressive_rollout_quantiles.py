"""DeepAR after Salinas et al. 2020 and GluonTS's torch DeepARModel, written by hand, on an
Electricity-shaped hourly problem (370 series, context 168, prediction 24): the GluonTS hourly lag
set (1-7, 23-25, 47-49, 71-73, 95-97, 119-121, 143-145, 167-169: 28 lags, so a past of 337 steps), the
mean-absolute scaler over the observed context (a floor of 1e-10), the lagged targets divided by the
scale, 4 time features and the age feature, a series-id embedding (370 x 20) and log(scale) repeated
over time, a 3-layer nn.LSTM of hidden 128 (dropout 0.1, cuDNN) unrolled once over context +
prediction with teacher forcing, a Gaussian head (Linear to mu, softplus to sigma) and the negative
log-likelihood by torch.distributions.Normal(...).log_prob weighted by the observed mask. fp32, Adam
(lr 1e-3, weight decay 1e-8), clip_grad_norm_ at 10, MultiStepLR; batch 2,048 windows; the first step
its own phase, then 3 steps; then the validation NLL of 2 batches under no_grad; then forecasting 512
series with 100 sample paths under inference_mode: the context unrolled once, the state
repeat_interleave'd to 51,200 rows, then 24 autoregressive steps (the lags gathered from the repeated
past target grown by torch.cat each step, one LSTM step, Normal(mu, sigma).sample()), the samples
reshaped to (512, 100, 24), torch.quantile at 0.1 / 0.5 / 0.9 and a sample CRPS-like score; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17405)
if SMALL:
    N_SERIES, CTX, PRED, HID, LAYERS, B, STEPS, VAL_N, FC_B, SAMPLES = 10, 24, 6, 16, 2, 8, 2, 1, 4, 5
    LAGS = [1, 2, 3, 23, 24, 25]
else:
    N_SERIES, CTX, PRED, HID, LAYERS, B, STEPS, VAL_N, FC_B, SAMPLES = (
        370,
        168,
        24,
        128,
        3,
        2048,
        4,
        2,
        512,
        100,
    )
    LAGS = sorted(
        {1, 2, 3, 4, 5, 6, 7} | {c + d for c in (24, 48, 72, 96, 120, 144, 168) for d in (-1, 0, 1)}
    )
HISTORY = CTX + max(LAGS)
EMB = 20
N_TIME_FEAT = 5  # hour, weekday, day of month, day of year (scaled to [-0.5, 0.5]) and age
device = "cuda" if torch.cuda.is_available() else "cpu"


def lagged_sequence_values(indices, prior_sequence, sequence):
    """GluonTS's lagged_sequence_values: for each lag, the values `lag` steps before each of `sequence`'s."""
    full_sequence = torch.cat((prior_sequence, sequence), dim=1)
    lags_values = []
    for lag_index in indices:
        begin_index = -lag_index - sequence.shape[1]
        end_index = -lag_index if lag_index > 0 else None
        lags_values.append(full_sequence[:, begin_index:end_index])
    return torch.stack(lags_values, dim=-1)


class DeepARModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedder = nn.Embedding(N_SERIES, EMB)
        self.rnn_input_size = len(LAGS) + N_TIME_FEAT + EMB + 1
        self.rnn = nn.LSTM(self.rnn_input_size, HID, num_layers=LAYERS, dropout=0.1, batch_first=True)
        self.proj_mu = nn.Linear(HID, 1)
        self.proj_sigma = nn.Linear(HID, 1)

    def distribution(self, output):
        mu = self.proj_mu(output).squeeze(-1)
        sigma = F.softplus(self.proj_sigma(output).squeeze(-1)) + 1e-6
        return mu, sigma

    def scale(self, past_target, past_observed):
        ctx = past_target[:, -CTX:]
        obs = past_observed[:, -CTX:]
        ts_sum = (ctx.abs() * obs).sum(dim=1, keepdim=True)
        num_observed = obs.sum(dim=1, keepdim=True)
        scale = ts_sum / torch.clamp(num_observed, min=1.0)
        return torch.clamp(scale, min=1e-10)

    def prepare_rnn_input(
        self,
        feat_static_cat,
        past_time_feat,
        past_target,
        past_observed,
        future_time_feat,
        future_target=None,
    ):
        context = past_target[..., -CTX:]
        scale = self.scale(past_target, past_observed)
        prior_input = past_target[..., :-CTX] / scale
        inp = context / scale
        if future_target is not None:
            inp = torch.cat((inp, future_target[..., :-1] / scale), dim=-1)
        lags = lagged_sequence_values(LAGS, prior_input, inp)
        time_feat = torch.cat((past_time_feat[..., -CTX + 1 :, :], future_time_feat), dim=-2)
        embedded_cat = self.embedder(feat_static_cat)
        static_feat = torch.cat((embedded_cat, scale.log()), dim=1)
        expanded_static_feat = static_feat.unsqueeze(1).expand(-1, time_feat.shape[-2], -1)
        features = torch.cat((expanded_static_feat, time_feat), dim=-1)
        return torch.cat((lags, features), dim=-1), scale, static_feat

    def unroll_lagged_rnn(self, *args):
        rnn_input, scale, static_feat = self.prepare_rnn_input(*args)
        output, new_state = self.rnn(rnn_input)
        mu, sigma = self.distribution(output)
        return mu, sigma, scale, static_feat, new_state

    def loss(
        self,
        feat_static_cat,
        past_time_feat,
        past_target,
        past_observed,
        future_time_feat,
        future_target,
        future_observed,
    ):
        mu, sigma, scale, _, _ = self.unroll_lagged_rnn(
            feat_static_cat, past_time_feat, past_target, past_observed, future_time_feat, future_target
        )
        context_target = past_target[:, -CTX + 1 :]
        target = torch.cat((context_target, future_target), dim=1) / scale
        observed = torch.cat((past_observed[:, -CTX + 1 :], future_observed), dim=1)
        nll = -Normal(mu, sigma).log_prob(target)
        return (nll * observed).sum() / observed.sum().clamp_min(1.0)

    def forward(
        self,
        feat_static_cat,
        past_time_feat,
        past_target,
        past_observed,
        future_time_feat,
        num_parallel_samples,
    ):
        mu, sigma, scale, static_feat, state = self.unroll_lagged_rnn(
            feat_static_cat, past_time_feat, past_target, past_observed, future_time_feat[:, :1]
        )
        repeated_scale = scale.repeat_interleave(repeats=num_parallel_samples, dim=0)
        repeated_static_feat = static_feat.repeat_interleave(repeats=num_parallel_samples, dim=0).unsqueeze(
            dim=1
        )
        repeated_past_target = (
            past_target.repeat_interleave(repeats=num_parallel_samples, dim=0) / repeated_scale
        )
        repeated_time_feat = future_time_feat.repeat_interleave(repeats=num_parallel_samples, dim=0)
        repeated_state = [s.repeat_interleave(repeats=num_parallel_samples, dim=1) for s in state]
        next_sample = Normal(
            mu[:, -1:].repeat_interleave(num_parallel_samples, 0),
            sigma[:, -1:].repeat_interleave(num_parallel_samples, 0),
        ).sample()
        future_samples = [next_sample * repeated_scale]
        for k in range(1, PRED):
            scaled_next_sample = next_sample
            next_features = torch.cat((repeated_static_feat, repeated_time_feat[:, k : k + 1]), dim=-1)
            next_lags = lagged_sequence_values(LAGS, repeated_past_target, scaled_next_sample)
            rnn_input = torch.cat((next_lags, next_features), dim=-1)
            output, repeated_state = self.rnn(rnn_input, repeated_state)
            repeated_past_target = torch.cat((repeated_past_target, scaled_next_sample), dim=1)
            mu_k, sigma_k = self.distribution(output)
            next_sample = Normal(mu_k, sigma_k).sample()
            future_samples.append(next_sample * repeated_scale)
        future_samples_concat = torch.cat(future_samples, dim=1)
        return future_samples_concat.reshape((-1, num_parallel_samples, PRED))


def time_features(bs, length, start):
    t = start + torch.arange(length, device=device)[None, :]
    hour = (t % 24).float() / 23.0 - 0.5
    weekday = ((t // 24) % 7).float() / 6.0 - 0.5
    mday = ((t // 24) % 31).float() / 30.0 - 0.5
    yday = ((t // 24) % 366).float() / 365.0 - 0.5
    age = torch.log10(2.0 + t.float())
    return torch.stack([hour, weekday, mday, yday, age], dim=-1).expand(bs, -1, -1)


def batch(bs):
    ids = torch.randint(0, N_SERIES, (bs,), device=device)
    start = torch.randint(0, 20000, (bs, 1), device=device)
    T = HISTORY + PRED
    t = start + torch.arange(T, device=device)[None, :]
    level = 100 + 900 * torch.rand(bs, 1, device=device)
    target = level * (
        1 + 0.3 * torch.sin(t.float() * 0.2618) + 0.1 * torch.randn(bs, T, device=device)
    ).clamp_min(0)
    observed = torch.ones_like(target)
    observed[:, :24] = (torch.rand(bs, 24, device=device) > 0.05).float()
    tf = time_features(bs, T, 0)
    return (
        ids,
        tf[:, :HISTORY],
        target[:, :HISTORY],
        observed[:, :HISTORY],
        tf[:, HISTORY:],
        target[:, HISTORY:],
        observed[:, HISTORY:],
    )


model = DeepARModel().to(device)
print(
    f"params {sum(p.numel() for p in model.parameters())} rnn input {model.rnn_input_size} lags {len(LAGS)}"
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-8)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2, 3], gamma=0.5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    data = batch(B)
    optimizer.zero_grad()
    loss = model.loss(*data)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    optimizer.step()
    scheduler.step()
    print(f"step {step} nll {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del data, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    val = [model.loss(*batch(B)) for _ in range(VAL_N)]
print(f"val nll {torch.stack(val).mean().item():.4f}")
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    ids, ptf, ptarget, pobs, ftf, ftarget, _ = batch(FC_B)
    samples = model(ids, ptf, ptarget, pobs, ftf, SAMPLES)  # (FC_B, SAMPLES, PRED)
    q = torch.quantile(samples, torch.tensor([0.1, 0.5, 0.9], device=device), dim=1)
    spread = (samples[:, :, None, :] - samples[:, None, :, :]).abs().mean(dim=(1, 2))
    crps = ((samples - ftarget[:, None]).abs().mean(dim=1) - 0.5 * spread).mean() / ftarget.abs().mean()
print(f"samples {tuple(samples.shape)} p50 {q[1].mean().item():.2f} crps {crps.item():.4f}")
if device == "cuda":
    print(
        f"forecast allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
