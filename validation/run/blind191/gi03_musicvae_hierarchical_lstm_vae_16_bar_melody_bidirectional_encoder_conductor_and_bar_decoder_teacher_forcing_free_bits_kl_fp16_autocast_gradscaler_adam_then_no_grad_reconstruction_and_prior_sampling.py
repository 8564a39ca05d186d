"""A hierarchical MusicVAE (Roberts et al. 2018) for 16-bar melodies written by hand: melodies are 256
sixteenth-note steps over 90 classes (88 piano pitches, note-off, no-event), one-hot inputs. Encoder: a
2-layer bidirectional LSTM (1,024 per direction) whose final forward and backward states give mu and
log-sigma of a 512-d latent through a linear layer (softplus for sigma); the conductor: z -> tanh(linear)
initial states of a 2-layer unidirectional LSTM (1,024) that runs 16 steps on zero inputs, one embedding
per bar; the decoder: a 2-layer LSTM (1,024) whose initial states come from each bar's conductor embedding
(tanh(linear)) and whose input at every step is the previous step's one-hot concatenated with that
embedding; all 16 bars are decoded together as a batch of B * 16 sequences of 16 steps (teacher forcing:
the previous ground-truth step). Loss: cross-entropy reconstruction summed over steps plus beta-weighted
KL with free bits (48 nats), beta 0.2.

Training under fp16 autocast with torch.amp.GradScaler and Adam (lr 1e-3, exponential decay 0.9999),
gradient clipping at 1.0 after unscale_, batch 128 (random one-hot melodies made on the device).
Phases: the first step; 2 more steps; reconstruction accuracy under torch.no_grad and fp16 autocast at
batch 256 (the latent mean, teacher-forced decode); then sampling 32 melodies from the prior in fp32
under torch.inference_mode: the conductor's 16 embeddings, then each bar decoded autoregressively step by
step with temperature 0.5 (an LSTM call of one step per position, 256 in all). 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19103)
if SMALL:
    B, BARS, STEPS_PER_BAR, ENC_H, DEC_H, Z, STEPS, EVAL_B, SAMPLE_B = 4, 4, 4, 32, 32, 16, 1, 4, 2
else:
    B, BARS, STEPS_PER_BAR, ENC_H, DEC_H, Z, STEPS, EVAL_B, SAMPLE_B = (
        128,
        16,
        16,
        1024,
        1024,
        512,
        2,
        256,
        32,
    )
CLASSES = 90
T = BARS * STEPS_PER_BAR
FREE_BITS, BETA = 48.0, 0.2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class MusicVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.LSTM(CLASSES, ENC_H, num_layers=2, batch_first=True, bidirectional=True)
        self.to_mu = nn.Linear(2 * ENC_H, Z)
        self.to_sigma = nn.Linear(2 * ENC_H, Z)
        self.cond_init = nn.Linear(Z, 2 * 2 * DEC_H)
        self.conductor = nn.LSTM(1, DEC_H, num_layers=2, batch_first=True)
        self.dec_init = nn.Linear(DEC_H, 2 * 2 * DEC_H)
        self.decoder = nn.LSTM(CLASSES + DEC_H, DEC_H, num_layers=2, batch_first=True)
        self.out = nn.Linear(DEC_H, CLASSES)

    def encode(self, x):
        _, (h, _) = self.encoder(x)
        # h: (layers * 2, b, H): the last layer's forward and backward final states
        last = torch.cat([h[-2], h[-1]], dim=-1)
        mu = self.to_mu(last)
        sigma = F.softplus(self.to_sigma(last)) + 1e-5
        return mu, sigma

    @staticmethod
    def init_state(linear, z, hidden):
        s = torch.tanh(linear(z)).view(z.shape[0], 2, 2, hidden)
        h = s[:, 0].transpose(0, 1).contiguous()
        c = s[:, 1].transpose(0, 1).contiguous()
        return h, c

    def conduct(self, z):
        state = self.init_state(self.cond_init, z, DEC_H)
        zeros = torch.zeros(z.shape[0], BARS, 1, device=z.device, dtype=z.dtype)
        emb, _ = self.conductor(zeros, state)
        return emb  # (b, BARS, DEC_H)

    def decode_teacher_forced(self, z, x):
        b = z.shape[0]
        emb = self.conduct(z).reshape(b * BARS, DEC_H)
        bars = x.view(b * BARS, STEPS_PER_BAR, CLASSES)
        prev = torch.cat([torch.zeros_like(bars[:, :1]), bars[:, :-1]], dim=1)
        inp = torch.cat([prev, emb[:, None].expand(-1, STEPS_PER_BAR, -1).to(prev.dtype)], dim=-1)
        out, _ = self.decoder(inp, self.init_state(self.dec_init, emb, DEC_H))
        return self.out(out).view(b, T, CLASSES)

    def forward(self, x):
        mu, sigma = self.encode(x)
        z = mu + sigma * torch.randn_like(sigma)
        return self.decode_teacher_forced(z, x), mu, sigma


def random_melodies(b):
    labels = torch.randint(0, CLASSES, (b, T), device=device)
    return F.one_hot(labels, CLASSES).float(), labels


def vae_loss(logits, labels, mu, sigma):
    rec = F.cross_entropy(logits.float().reshape(-1, CLASSES), labels.reshape(-1), reduction="none")
    rec = rec.view(-1, T).sum(1).mean()
    kl = 0.5 * (mu.float() ** 2 + sigma.float() ** 2 - 1 - 2 * torch.log(sigma.float())).sum(-1)
    kl_cost = torch.clamp(kl - FREE_BITS, min=0).mean()
    return rec + BETA * kl_cost, rec, kl.mean()


model = MusicVAE().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9999)
scaler = torch.amp.GradScaler("cuda", enabled=amp)


def train_step():
    x, labels = random_melodies(B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        logits, mu, sigma = model(x)
    loss, rec, kl = vae_loss(logits, labels, mu, sigma)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    sched.step()
    return loss.item(), rec.item(), kl.item()


model.train()
print("step 0 loss {:.2f} rec {:.2f} kl {:.2f}".format(*train_step()))
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    print(f"step {step} loss %.2f rec %.2f kl %.2f" % train_step())
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    x, labels = random_melodies(EVAL_B)
    mu, sigma = model.encode(x)
    logits = model.decode_teacher_forced(mu, x)
    acc = (logits.argmax(-1) == labels).float().mean()
print(f"reconstruction accuracy {acc.item():.4f}")
if device == "cuda":
    print(f"reconstruction peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
del x, labels, logits


@torch.inference_mode()
def sample_prior(n, temperature=0.5):
    z = torch.randn(n, Z, device=device)
    emb = model.conduct(z)
    notes = []
    for bar in range(BARS):
        e = emb[:, bar]
        state = model.init_state(model.dec_init, e, DEC_H)
        prev = torch.zeros(n, 1, CLASSES, device=device)
        for _ in range(STEPS_PER_BAR):
            out, state = model.decoder(torch.cat([prev, e[:, None]], dim=-1), state)
            probs = F.softmax(model.out(out[:, 0]) / temperature, dim=-1)
            tok = torch.multinomial(probs, 1)
            notes.append(tok)
            prev = F.one_hot(tok, CLASSES).float()
    return torch.cat(notes, dim=1)


melodies = sample_prior(SAMPLE_B).cpu()
print(f"sampled {tuple(melodies.shape)} distinct classes {melodies.unique().numel()}")
if device == "cuda":
    print(f"sampling peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
