"""N-BEATS after Oreshkin et al. 2020 and the ElementAI/N-BEATS repository's models/nbeats.py, written by
hand, on M4-Hourly-shaped windows (horizon 48, look-back 7 x 48 = 336, an input mask and an output
mask as the repository's sampler gives): the generic model (30 stacks of 1 block, 4 fully connected
ReLU layers of 512, GenericBasis splitting theta into backcast and forecast), the residuals flipped in
time and updated as (residuals - backcast) * input_mask, the forecast starting from the last value; the
sMAPE loss with the repository's divide_no_nan (NaN and inf results zeroed by boolean-mask
assignment). fp32, Adam (lr 1e-3), clip_grad_norm_ at 1.0 and the repository's step decay
(lr * 0.5 ** (step // decay_step)) by LambdaLR; batch 8,192 windows; the first generic step its own
phase, then 3 steps; then the interpretable model (a trend stack of 3 blocks that share one block's
weights, polynomial degree 3 bases, layers of 256; a seasonality stack of 3 shared blocks with
Fourier bases of 48 harmonics, layers of 2,048; einsum over fixed basis Parameters) trained 3 steps
with MASE-like scaled absolute error; then the ensemble forecast of both models over 32,768 test
windows in chunks of 16,384 under inference_mode, stacked and reduced by torch.median; 4 phases."""

import os

import numpy as np
import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17403)
if SMALL:
    H, B, STACKS, LAYER, TREND_LAYER, SEAS_LAYER, STEPS, TEST_N, CHUNK = 8, 16, 3, 32, 16, 32, 2, 64, 32
else:
    H, B, STACKS, LAYER, TREND_LAYER, SEAS_LAYER, STEPS, TEST_N, CHUNK = (
        48,
        8192,
        30,
        512,
        256,
        2048,
        4,
        32768,
        16384,
    )
INPUT = 7 * H
device = "cuda" if torch.cuda.is_available() else "cpu"


class NBeatsBlock(nn.Module):
    def __init__(self, input_size, theta_size, basis_function, layers, layer_size):
        super().__init__()
        self.layers = nn.ModuleList(
            [nn.Linear(in_features=input_size, out_features=layer_size)]
            + [nn.Linear(in_features=layer_size, out_features=layer_size) for _ in range(layers - 1)]
        )
        self.basis_parameters = nn.Linear(in_features=layer_size, out_features=theta_size)
        self.basis_function = basis_function

    def forward(self, x):
        block_input = x
        for layer in self.layers:
            block_input = torch.relu(layer(block_input))
        basis_parameters = self.basis_parameters(block_input)
        return self.basis_function(basis_parameters)


class NBeats(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = blocks

    def forward(self, x, input_mask):
        residuals = x.flip(dims=(1,))
        input_mask = input_mask.flip(dims=(1,))
        forecast = x[:, -1:]
        for block in self.blocks:
            backcast, block_forecast = block(residuals)
            residuals = (residuals - backcast) * input_mask
            forecast = forecast + block_forecast
        return forecast


class GenericBasis(nn.Module):
    def __init__(self, backcast_size, forecast_size):
        super().__init__()
        self.backcast_size, self.forecast_size = backcast_size, forecast_size

    def forward(self, theta):
        return theta[:, : self.backcast_size], theta[:, -self.forecast_size :]


class TrendBasis(nn.Module):
    def __init__(self, degree_of_polynomial, backcast_size, forecast_size):
        super().__init__()
        self.polynomial_size = degree_of_polynomial + 1
        self.backcast_time = nn.Parameter(
            torch.tensor(
                np.concatenate(
                    [
                        np.power(np.arange(backcast_size, dtype=np.float64) / backcast_size, i)[None, :]
                        for i in range(self.polynomial_size)
                    ]
                ),
                dtype=torch.float32,
            ),
            requires_grad=False,
        )
        self.forecast_time = nn.Parameter(
            torch.tensor(
                np.concatenate(
                    [
                        np.power(np.arange(forecast_size, dtype=np.float64) / forecast_size, i)[None, :]
                        for i in range(self.polynomial_size)
                    ]
                ),
                dtype=torch.float32,
            ),
            requires_grad=False,
        )

    def forward(self, theta):
        backcast = torch.einsum("bp,pt->bt", theta[:, self.polynomial_size :], self.backcast_time)
        forecast = torch.einsum("bp,pt->bt", theta[:, : self.polynomial_size], self.forecast_time)
        return backcast, forecast


class SeasonalityBasis(nn.Module):
    def __init__(self, harmonics, backcast_size, forecast_size):
        super().__init__()
        self.frequency = np.append(
            np.zeros(1, dtype=np.float32),
            np.arange(harmonics, harmonics / 2 * forecast_size, dtype=np.float32) / harmonics,
        )[None, :]
        backcast_grid = (
            -2
            * np.pi
            * (np.arange(backcast_size, dtype=np.float32)[:, None] / forecast_size)
            * self.frequency
        )
        forecast_grid = (
            2 * np.pi * (np.arange(forecast_size, dtype=np.float32)[:, None] / forecast_size) * self.frequency
        )
        self.backcast_cos_template = nn.Parameter(
            torch.tensor(np.transpose(np.cos(backcast_grid)), dtype=torch.float32), requires_grad=False
        )
        self.backcast_sin_template = nn.Parameter(
            torch.tensor(np.transpose(np.sin(backcast_grid)), dtype=torch.float32), requires_grad=False
        )
        self.forecast_cos_template = nn.Parameter(
            torch.tensor(np.transpose(np.cos(forecast_grid)), dtype=torch.float32), requires_grad=False
        )
        self.forecast_sin_template = nn.Parameter(
            torch.tensor(np.transpose(np.sin(forecast_grid)), dtype=torch.float32), requires_grad=False
        )

    def forward(self, theta):
        params_per_harmonic = theta.shape[1] // 4
        backcast_harmonics_cos = torch.einsum(
            "bp,pt->bt",
            theta[:, 2 * params_per_harmonic : 3 * params_per_harmonic],
            self.backcast_cos_template,
        )
        backcast_harmonics_sin = torch.einsum(
            "bp,pt->bt", theta[:, 3 * params_per_harmonic :], self.backcast_sin_template
        )
        backcast = backcast_harmonics_sin + backcast_harmonics_cos
        forecast_harmonics_cos = torch.einsum(
            "bp,pt->bt", theta[:, :params_per_harmonic], self.forecast_cos_template
        )
        forecast_harmonics_sin = torch.einsum(
            "bp,pt->bt", theta[:, params_per_harmonic : 2 * params_per_harmonic], self.forecast_sin_template
        )
        forecast = forecast_harmonics_sin + forecast_harmonics_cos
        return backcast, forecast


def generic(input_size, output_size, stacks, layers, layer_size):
    return NBeats(
        nn.ModuleList(
            [
                NBeatsBlock(
                    input_size,
                    input_size + output_size,
                    GenericBasis(input_size, output_size),
                    layers,
                    layer_size,
                )
                for _ in range(stacks)
            ]
        )
    )


def interpretable(
    input_size,
    output_size,
    trend_blocks=3,
    trend_layers=4,
    trend_layer_size=256,
    degree_of_polynomial=3,
    seasonality_blocks=3,
    seasonality_layers=4,
    seasonality_layer_size=2048,
    num_of_harmonics=1,
):
    trend_block = NBeatsBlock(
        input_size,
        2 * (degree_of_polynomial + 1),
        TrendBasis(degree_of_polynomial, input_size, output_size),
        trend_layers,
        trend_layer_size,
    )
    seasonality_block = NBeatsBlock(
        input_size,
        4 * int(np.ceil(num_of_harmonics / 2 * output_size) - (num_of_harmonics - 1)),
        SeasonalityBasis(num_of_harmonics, input_size, output_size),
        seasonality_layers,
        seasonality_layer_size,
    )
    return NBeats(
        nn.ModuleList(
            [trend_block for _ in range(trend_blocks)]
            + [seasonality_block for _ in range(seasonality_blocks)]
        )
    )


def divide_no_nan(a, b):
    result = a / b
    result[result != result] = 0.0
    result[result == np.inf] = 0.0
    return result


def smape_2_loss(forecast, target, mask):
    return 200 * torch.mean(
        divide_no_nan(torch.abs(forecast - target), torch.abs(forecast.data) + torch.abs(target.data)) * mask
    )


def mase_loss(insample, freq, forecast, target, mask):
    masep = torch.mean(torch.abs(insample[:, freq:] - insample[:, :-freq]), dim=1)
    masked_masep_inv = divide_no_nan(mask, masep[:, None])
    return torch.mean(torch.abs(target - forecast) * masked_masep_inv)


def windows(n):
    t = torch.arange(INPUT + H, device=device, dtype=torch.float32)
    level = 50 + 450 * torch.rand(n, 1, device=device)
    season = torch.sin(2 * np.pi * t[None, :] / 24 + 6.28 * torch.rand(n, 1, device=device))
    series = level * (1 + 0.2 * season + 0.05 * torch.randn(n, INPUT + H, device=device))
    x, y = series[:, :INPUT], series[:, INPUT:]
    lengths = torch.randint(H, INPUT + 1, (n, 1), device=device)
    x_mask = (torch.arange(INPUT, device=device)[None, :] >= INPUT - lengths).float()
    return x * x_mask, x_mask, y, torch.ones_like(y)


def train(model, loss_name, steps, first_phase):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    decay_step = max(1, steps // 3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 0.5 ** (i // decay_step))
    model.train()
    for step in range(steps):
        x, x_mask, y, y_mask = windows(B)
        optimizer.zero_grad()
        forecast = model(x, x_mask)
        if loss_name == "SMAPE":
            training_loss = smape_2_loss(forecast, y, y_mask)
        else:
            training_loss = mase_loss(x, 24, forecast, y, y_mask)
        training_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        print(f"{loss_name} step {step} loss {training_loss.item():.4f}")
        if first_phase and step == 0 and device == "cuda":
            print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
            torch.cuda.reset_peak_memory_stats()
    return optimizer


generic_model = generic(INPUT, H, STACKS, 4, LAYER).to(device)
print(f"generic params {sum(p.numel() for p in generic_model.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
opt_g = train(generic_model, "SMAPE", STEPS, True)
if device == "cuda":
    print(f"generic peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

interp_model = interpretable(INPUT, H, trend_layer_size=TREND_LAYER, seasonality_layer_size=SEAS_LAYER).to(
    device
)
print(f"interpretable params {sum(p.numel() for p in interp_model.parameters() if p.requires_grad)}")
opt_i = train(interp_model, "MASE", STEPS - 1, False)
del opt_g, opt_i
if device == "cuda":
    print(f"interpretable peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

generic_model.eval()
interp_model.eval()
with torch.inference_mode():
    x, x_mask, y, _ = windows(TEST_N)
    forecasts = []
    for i in range(0, TEST_N, CHUNK):
        members = torch.stack(
            [m(x[i : i + CHUNK], x_mask[i : i + CHUNK]) for m in (generic_model, interp_model)]
        )
        forecasts.append(members)
    ensemble = torch.cat(forecasts, dim=1)
    median = torch.median(ensemble, dim=0).values
    smape = 200 * torch.mean(divide_no_nan(torch.abs(median - y), torch.abs(median) + torch.abs(y)))
print(f"ensemble smape {smape.item():.3f} {tuple(ensemble.shape)}")
if device == "cuda":
    print(
        f"test allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
