"""A variational recurrent neural network (Chung et al. 2015, "A Recurrent Latent Variable Model for
Sequential Data") on binary piano-roll sequences (88 keys), in the shape of the well-known PyTorch
implementation: feature extractors phi_x / phi_z, a prior network and an encoder conditioned on the
recurrent state, a Bernoulli decoder, and a 2-layer ``nn.GRU`` stepped one time step at a time
(``rnn(x_t.unsqueeze(0), h)``, cuDNN with sequence length 1) inside a Python loop over 48 steps. The
loss is the negative ELBO: a closed-form KL between the diagonal Gaussians of encoder and prior plus
``binary_cross_entropy_with_logits``, summed over time. Training runs under fp16 autocast with
``torch.amp.GradScaler`` (scale, unscale_, clip_grad_norm_, step, update) and Adam; an EMA copy of the
model (``copy.deepcopy``) is updated in place after every step.

Phases: 0 model, EMA copy and data on the GPU; 1 fp16 autocast training with GradScaler; 2 ELBO of the
EMA model on held-out sequences under no_grad and fp16 autocast; 3 generation of 512 sequences of 96
steps from the EMA model's prior under inference_mode (z from the prior, x_t ~ Bernoulli, fed back);
4 a longer teacher-forced evaluation in fp32 (no autocast) under no_grad."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(1)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class VRNN(nn.Module):
    def __init__(self, x_dim, h_dim, z_dim, n_layers):
        super().__init__()
        self.x_dim, self.h_dim, self.z_dim, self.n_layers = x_dim, h_dim, z_dim, n_layers
        self.phi_x = nn.Sequential(nn.Linear(x_dim, h_dim), nn.ReLU(), nn.Linear(h_dim, h_dim), nn.ReLU())
        self.phi_z = nn.Sequential(nn.Linear(z_dim, h_dim), nn.ReLU())
        self.enc = nn.Sequential(
            nn.Linear(h_dim + h_dim, h_dim), nn.ReLU(), nn.Linear(h_dim, h_dim), nn.ReLU()
        )
        self.enc_mean = nn.Linear(h_dim, z_dim)
        self.enc_std = nn.Sequential(nn.Linear(h_dim, z_dim), nn.Softplus())
        self.prior = nn.Sequential(nn.Linear(h_dim, h_dim), nn.ReLU())
        self.prior_mean = nn.Linear(h_dim, z_dim)
        self.prior_std = nn.Sequential(nn.Linear(h_dim, z_dim), nn.Softplus())
        self.dec = nn.Sequential(
            nn.Linear(h_dim + h_dim, h_dim), nn.ReLU(), nn.Linear(h_dim, h_dim), nn.ReLU()
        )
        self.dec_logits = nn.Linear(h_dim, x_dim)
        self.rnn = nn.GRU(h_dim + h_dim, h_dim, n_layers)

    def forward(self, x):
        kld_loss, nll_loss = 0, 0
        h = torch.zeros(self.n_layers, x.size(1), self.h_dim, device=x.device)
        for t in range(x.size(0)):
            phi_x_t = self.phi_x(x[t])
            enc_t = self.enc(torch.cat([phi_x_t, h[-1]], 1))
            enc_mean_t = self.enc_mean(enc_t)
            enc_std_t = self.enc_std(enc_t)
            prior_t = self.prior(h[-1])
            prior_mean_t = self.prior_mean(prior_t)
            prior_std_t = self.prior_std(prior_t)
            z_t = self._reparameterized_sample(enc_mean_t, enc_std_t)
            phi_z_t = self.phi_z(z_t)
            dec_t = self.dec(torch.cat([phi_z_t, h[-1]], 1))
            dec_logits_t = self.dec_logits(dec_t)
            _, h = self.rnn(torch.cat([phi_x_t, phi_z_t], 1).unsqueeze(0), h)
            kld_loss = kld_loss + self._kld_gauss(enc_mean_t, enc_std_t, prior_mean_t, prior_std_t)
            nll_loss = nll_loss + F.binary_cross_entropy_with_logits(dec_logits_t, x[t], reduction="sum")
        return kld_loss, nll_loss

    def sample(self, seq_len, batch):
        samples = torch.zeros(seq_len, batch, self.x_dim, device=self.dec_logits.weight.device)
        h = torch.zeros(self.n_layers, batch, self.h_dim, device=samples.device)
        for t in range(seq_len):
            prior_t = self.prior(h[-1])
            z_t = self._reparameterized_sample(self.prior_mean(prior_t), self.prior_std(prior_t))
            phi_z_t = self.phi_z(z_t)
            dec_t = self.dec(torch.cat([phi_z_t, h[-1]], 1))
            x_t = torch.bernoulli(torch.sigmoid(self.dec_logits(dec_t)))
            phi_x_t = self.phi_x(x_t)
            _, h = self.rnn(torch.cat([phi_x_t, phi_z_t], 1).unsqueeze(0), h)
            samples[t] = x_t
        return samples

    def _reparameterized_sample(self, mean, std):
        eps = torch.empty_like(std).normal_()
        return eps.mul(std).add_(mean)

    def _kld_gauss(self, mean_1, std_1, mean_2, std_2):
        kld_element = (
            2 * torch.log(std_2 + 1e-6)
            - 2 * torch.log(std_1 + 1e-6)
            + (std_1.pow(2) + (mean_1 - mean_2).pow(2)) / (std_2 + 1e-6).pow(2)
            - 1
        )
        return 0.5 * torch.sum(kld_element)


x_dim, h_dim, z_dim, n_layers = 88, 512, 64, 2
seq_len, batch_size = 48, 256
# synthetic piano rolls: a few sustained notes per time step (Bernoulli with per-key rates)
rates = torch.rand(x_dim, device=device) * 0.08
train_rolls = torch.bernoulli(rates.expand(seq_len, 1024, x_dim)).contiguous()
valid_rolls = torch.bernoulli(rates.expand(seq_len, 256, x_dim)).contiguous()

model = VRNN(x_dim, h_dim, z_dim, n_layers).to(device)
ema = copy.deepcopy(model).requires_grad_(False)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**10)
report("model, ema copy and data")

model.train()
for step in range(5):
    idx = torch.randint(0, train_rolls.shape[1], (batch_size,), device=device)
    x = train_rolls[:, idx]
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        kld_loss, nll_loss = model(x)
        loss = (kld_loss + nll_loss) / batch_size
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    scaler.step(optimizer)
    scaler.update()
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters(), strict=True):
            e.mul_(0.995).add_(p.detach(), alpha=0.005)
    print(f"step {step} kld {kld_loss.item() / batch_size:.3f} nll {nll_loss.item() / batch_size:.3f}")
del x, kld_loss, nll_loss, loss
report("fp16 autocast training with GradScaler")

ema.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    total = 0.0
    for i in range(0, valid_rolls.shape[1], 256):
        kld, nll = ema(valid_rolls[:, i : i + 256])
        total += (kld + nll).item()
print("valid -ELBO per sequence", total / valid_rolls.shape[1])
report("EMA ELBO under no_grad")

with torch.inference_mode():
    generated = ema.sample(96, 512)
    density = generated.mean().item()
print("generated", tuple(generated.shape), "note density", density)
report("inference_mode generation")

with torch.no_grad():
    kld, nll = ema(torch.cat([valid_rolls, valid_rolls], 0))
print("fp32 -ELBO (96 steps)", ((kld + nll) / valid_rolls.shape[1]).item())
report("fp32 long teacher-forced eval")
