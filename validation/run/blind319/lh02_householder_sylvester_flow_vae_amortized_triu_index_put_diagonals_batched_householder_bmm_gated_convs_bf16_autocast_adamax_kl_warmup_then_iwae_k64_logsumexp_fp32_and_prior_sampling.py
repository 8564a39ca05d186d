"""A VAE with Householder Sylvester normalizing flows (van den Berg, Hasenclever, Tomczak, Welling 2018,
"Sylvester Normalizing Flows for Variational Inference"), in the shape of the authors' PyTorch code, on
binarized 28 x 28 images: a convolutional encoder whose last hidden vector also amortizes every flow's
parameters -- a full ``z x z`` matrix per flow split into upper-triangular R1 and R2 by a ``torch.triu``
mask, their diagonals overwritten through advanced indexing (``r1[:, diag_idx, diag_idx, :] = ...``,
``index_put_``), 8 Householder vectors per flow turned into an orthogonal Q by a chain of batched
``I - 2 v v^T`` products (``torch.bmm``) -- and four Sylvester layers
``z' = z + Q R1 tanh(R2 Q^T z + b)`` with log|det| from the triangular diagonals; a transposed-conv
Bernoulli decoder. Training maximises the ELBO (KL warm-up as a Python float) under bf16 autocast with
Adamax (the paper's optimizer); evaluation is the importance-weighted bound with k = 64 samples per image
(``logsumexp(log_w, 1) - log k``) in fp32.

Phases: 0 model and data; 1 bf16 autocast ELBO training with Adamax and KL warm-up; 2 IWAE (k = 64)
log-likelihood estimate in fp32 under no_grad, 32 images (2,048 samples) per chunk; 3 reconstructions
through the flow under fp16 autocast and 2,048 samples from the prior decoded under inference_mode."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(7)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class GatedConv2d(nn.Module):
    def __init__(self, cin, cout, k, stride, padding):
        super().__init__()
        self.h = nn.Conv2d(cin, cout, k, stride, padding)
        self.g = nn.Conv2d(cin, cout, k, stride, padding)

    def forward(self, x):
        return self.h(x) * torch.sigmoid(self.g(x))


class GatedConvTranspose2d(nn.Module):
    def __init__(self, cin, cout, k, stride, padding, output_padding=0):
        super().__init__()
        self.h = nn.ConvTranspose2d(cin, cout, k, stride, padding, output_padding)
        self.g = nn.ConvTranspose2d(cin, cout, k, stride, padding, output_padding)

    def forward(self, x):
        return self.h(x) * torch.sigmoid(self.g(x))


class Sylvester(nn.Module):
    """One Sylvester flow layer z' = z + Q R1 h(R2 Q^T z + b), h = tanh."""

    def forward(self, zk, r1, r2, q_ortho, b, diag_idx):
        zk = zk.unsqueeze(1)
        diag_r1 = r1[:, diag_idx, diag_idx]
        diag_r2 = r2[:, diag_idx, diag_idx]
        r1_hat = r1
        r2_hat = r2
        qr2 = torch.bmm(q_ortho, r2_hat.transpose(2, 1))
        qr1 = torch.bmm(q_ortho, r1_hat)
        r2qzb = torch.bmm(zk, qr2) + b
        z = torch.bmm(torch.tanh(r2qzb), qr1.transpose(2, 1)) + zk
        z = z.squeeze(1)
        diag_j = diag_r1 * diag_r2
        diag_j = (1 - torch.tanh(r2qzb.squeeze(1)) ** 2) * diag_j + 1.0
        log_diag_j = diag_j.abs().log()
        return z, log_diag_j.sum(-1)


class HouseholderSylvesterVAE(nn.Module):
    def __init__(self, z_size=64, num_flows=4, num_householder=8, hidden=256):
        super().__init__()
        self.z_size, self.num_flows, self.num_householder = z_size, num_flows, num_householder
        self.q_z_nn = nn.Sequential(
            GatedConv2d(1, 32, 5, 1, 2),
            GatedConv2d(32, 32, 5, 2, 2),
            GatedConv2d(32, 64, 5, 1, 2),
            GatedConv2d(64, 64, 5, 2, 2),
            GatedConv2d(64, 64, 5, 1, 2),
            GatedConv2d(64, hidden, 7, 1, 0),
        )
        self.q_z_mean = nn.Linear(hidden, z_size)
        self.q_z_var = nn.Sequential(
            nn.Linear(hidden, z_size), nn.Softplus(), nn.Hardtanh(min_val=6e-3, max_val=7.0)
        )
        self.p_x_nn = nn.Sequential(
            GatedConvTranspose2d(z_size, 64, 7, 1, 0),
            GatedConvTranspose2d(64, 64, 5, 1, 2),
            GatedConvTranspose2d(64, 32, 5, 2, 2, 1),
            GatedConvTranspose2d(32, 32, 5, 1, 2),
            GatedConvTranspose2d(32, 32, 5, 2, 2, 1),
            GatedConvTranspose2d(32, 32, 5, 1, 2),
        )
        self.p_x_mean = nn.Conv2d(32, 1, 1)
        triu_mask = torch.triu(torch.ones(z_size, z_size), diagonal=1).unsqueeze(0)
        self.register_buffer("triu_mask", triu_mask)
        self.register_buffer("diag_idx", torch.arange(0, z_size).long())
        self.register_buffer("_eye", torch.eye(z_size, z_size).unsqueeze(0))
        self.amor_d = nn.Linear(hidden, num_flows * z_size * z_size)
        self.amor_diag1 = nn.Sequential(nn.Linear(hidden, num_flows * z_size), nn.Tanh())
        self.amor_diag2 = nn.Sequential(nn.Linear(hidden, num_flows * z_size), nn.Tanh())
        self.amor_q = nn.Linear(hidden, num_flows * z_size * num_householder)
        self.amor_b = nn.Linear(hidden, num_flows * z_size)
        self.flows = nn.ModuleList([Sylvester() for _ in range(num_flows)])

    def batch_construct_orthogonal(self, q):
        # q: (B, num_flows * z_size * num_householder) -> (num_flows, B, z, z)
        q = q.view(-1, self.z_size)
        norm = torch.norm(q, p=2, dim=1, keepdim=True)
        v = torch.div(q, norm)
        vvT = torch.bmm(v.unsqueeze(2), v.unsqueeze(1))
        amat = self._eye - 2 * vvT
        amat = amat.view(-1, self.num_householder, self.z_size, self.z_size)
        tmp = amat[:, 0]
        for k in range(1, self.num_householder):
            tmp = torch.bmm(amat[:, k], tmp)
        amat = tmp.view(-1, self.num_flows, self.z_size, self.z_size)
        return amat.transpose(0, 1)

    def encode(self, x):
        batch_size = x.size(0)
        h = self.q_z_nn(x).view(-1, self.q_z_mean.in_features)
        mean_z = self.q_z_mean(h)
        var_z = self.q_z_var(h)
        full_d = self.amor_d(h).view(batch_size, self.z_size, self.z_size, self.num_flows)
        diag1 = self.amor_diag1(h).view(batch_size, self.z_size, self.num_flows)
        diag2 = self.amor_diag2(h).view(batch_size, self.z_size, self.num_flows)
        r1 = full_d * self.triu_mask.unsqueeze(-1)
        r2 = full_d.transpose(2, 1) * self.triu_mask.unsqueeze(-1)
        r1[:, self.diag_idx, self.diag_idx, :] = diag1.to(r1.dtype)
        r2[:, self.diag_idx, self.diag_idx, :] = diag2.to(r2.dtype)
        q = self.amor_q(h)
        b = self.amor_b(h).view(batch_size, 1, self.z_size, self.num_flows)
        return mean_z, var_z, r1, r2, q, b

    def flow(self, z0, r1, r2, q, b):
        q_ortho = self.batch_construct_orthogonal(q)
        z = z0
        log_det_j = torch.zeros(z0.shape[0], device=z0.device, dtype=z0.dtype)
        for k, flow_k in enumerate(self.flows):
            z, log_det = flow_k(z, r1[..., k], r2[..., k], q_ortho[k], b[..., k], self.diag_idx)
            log_det_j = log_det_j + log_det
        return z, log_det_j

    def decode(self, z):
        h = self.p_x_nn(z.view(-1, self.z_size, 1, 1))
        return self.p_x_mean(h)

    def log_weights(self, x):
        """log p(x|z_K) + log p(z_K) - log q(z_0|x) + sum log|det| for one sample per row of x."""
        mean_z, var_z, r1, r2, q, b = self.encode(x)
        eps = torch.randn_like(mean_z)
        z0 = mean_z + eps * var_z.sqrt()
        zk, log_det_j = self.flow(z0, r1, r2, q, b)
        logits = self.decode(zk)
        log_px = -F.binary_cross_entropy_with_logits(logits, x, reduction="none").flatten(1).sum(1)
        log_pz = -0.5 * (zk.pow(2) + math.log(2 * math.pi)).sum(1)
        log_qz0 = -0.5 * (eps.pow(2) + var_z.log() + math.log(2 * math.pi)).sum(1)
        return log_px, log_pz - log_qz0 + log_det_j


# binarized "digits": thick random strokes on 28 x 28
base = torch.rand(6000, 1, 7, 7, device=device)
train_x = torch.bernoulli(F.interpolate(base, size=(28, 28), mode="bilinear", align_corners=False).pow(3))
test_x = train_x[-512:].clone()
train_x = train_x[:-512].contiguous()

model = HouseholderSylvesterVAE().to(device)
optimizer = torch.optim.Adamax(model.parameters(), lr=5e-4, eps=1e-7)
report("sylvester vae and binarized data")

model.train()
warmup_steps = 10
for step in range(12):
    beta = min(1.0, (step + 1) / warmup_steps)
    idx = torch.randint(0, train_x.shape[0], (128,), device=device)
    x = train_x[idx]
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        log_px, kl_term = model.log_weights(x)
        loss = -(log_px + beta * kl_term).mean()
    loss.backward()
    optimizer.step()
    if step % 4 == 0:
        print(f"step {step} beta {beta:.2f} loss {loss.item():.2f}")
del x, log_px, kl_term, loss
report("bf16 autocast elbo training adamax kl warmup")

model.eval()
k = 64
total = 0.0
with torch.no_grad():
    for i in range(0, 128, 32):
        xb = test_x[i : i + 32]
        x_rep = xb.repeat_interleave(k, dim=0)
        log_px, rest = model.log_weights(x_rep)
        log_w = (log_px + rest).view(-1, k)
        iwae = torch.logsumexp(log_w, dim=1) - math.log(k)
        total += iwae.sum().item()
print("IWAE log-likelihood estimate", total / 128)
report("iwae k64 fp32 under no_grad")

with torch.inference_mode():
    with torch.autocast("cuda", dtype=torch.float16):
        mean_z, var_z, r1, r2, q, b = model.encode(test_x)
        zk, _ = model.flow(mean_z, r1, r2, q, b)
        recon = torch.sigmoid(model.decode(zk))
    z = torch.randn(2048, model.z_size, device=device)
    samples = torch.bernoulli(torch.sigmoid(model.decode(z)))
    print("recon", tuple(recon.shape), "samples mean", samples.mean().item())
report("flow reconstructions fp16 and prior samples under inference_mode")
