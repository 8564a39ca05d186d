"""SampleRNN (Mehri et al. 2017), a three-tier autoregressive raw-audio model in the shape of the
samplernn-pytorch reference: two frame-level tiers (frames of 16 and 4 samples), each a 2-layer
``nn.GRU(batch_first=True)`` with a learned initial state, a 1x1 Conv1d expanding the frame's samples
and a learned upsampling ``ConvTranspose1d(kernel_size=stride=ratio)`` conditioning the tier below; a
sample-level MLP embeds the previous 4 quantised samples (``nn.Embedding(256, 256)``), mixes them with a
Conv1d of kernel 4 and ends in 256-way log_softmax. Training is truncated BPTT over chunks of 1,024
samples of 4,096-sample sequences: the tiers' hidden states are carried across chunks and detached,
reset per batch of sequences. bf16 autocast, Adam, ``clip_grad_value_`` at 1 (the reference clips
gradients by value), and EMA weights updated with ``lerp_`` under no_grad.

Phases: 0 model, EMA copy and synthetic 16 kHz waveforms quantised to 256 levels; 1 TBPTT training
(2 batches x 4 chunks, bf16 autocast); 2 validation NLL in bits per sample over whole 4,096-sample
sequences in one pass, fp32 under no_grad; 3 sample-by-sample generation of 32 clips of 768 samples from
the EMA model under inference_mode and bf16 autocast (frame tiers run every 16 / 4 samples, multinomial
draws written into a preallocated sequence buffer)."""

import copy
import itertools
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


q_levels = 256


def linear_quantize(wave):
    return ((wave.clamp(-1, 1) + 1) / 2 * (q_levels - 1e-2)).long()


def linear_dequantize(samples):
    return samples.float() / (q_levels / 2) - 1


class FrameLevelRNN(nn.Module):
    def __init__(self, frame_size, n_frame_samples, n_rnn, dim):
        super().__init__()
        self.frame_size, self.n_frame_samples, self.n_rnn, self.dim = frame_size, n_frame_samples, n_rnn, dim
        self.h0 = nn.Parameter(torch.zeros(n_rnn, dim))
        self.input_expand = nn.Conv1d(n_frame_samples, dim, 1)
        self.rnn = nn.GRU(dim, dim, n_rnn, batch_first=True)
        self.upsampling = nn.ConvTranspose1d(dim, dim, frame_size, stride=frame_size)

    def forward(self, prev_samples, upper_tier_conditioning, hidden):
        batch_size = prev_samples.size(0)
        x = self.input_expand(prev_samples.permute(0, 2, 1)).permute(0, 2, 1)
        if upper_tier_conditioning is not None:
            x = x + upper_tier_conditioning
        if hidden is None:
            hidden = self.h0.unsqueeze(1).expand(self.n_rnn, batch_size, self.dim).contiguous()
        output, hidden = self.rnn(x, hidden)
        output = self.upsampling(output.permute(0, 2, 1)).permute(0, 2, 1)
        return output, hidden


class SampleLevelMLP(nn.Module):
    def __init__(self, frame_size, dim):
        super().__init__()
        self.frame_size = frame_size
        self.embedding = nn.Embedding(q_levels, q_levels)
        self.input = nn.Conv1d(q_levels, dim, frame_size, bias=False)
        self.hidden = nn.Conv1d(dim, dim, 1)
        self.output = nn.Conv1d(dim, q_levels, 1)

    def forward(self, prev_samples, upper_tier_conditioning):
        batch_size = prev_samples.size(0)
        x = self.embedding(prev_samples.contiguous().view(-1)).view(batch_size, -1, q_levels)
        x = x.permute(0, 2, 1)
        upper = upper_tier_conditioning.permute(0, 2, 1)
        x = F.relu(self.input(x) + upper)
        x = F.relu(self.hidden(x))
        x = self.output(x).permute(0, 2, 1).contiguous()
        return F.log_softmax(x.view(-1, q_levels), dim=1).view(batch_size, -1, q_levels)


class SampleRNN(nn.Module):
    def __init__(self, frame_sizes=(4, 16), n_rnn=2, dim=1024):
        super().__init__()
        self.lookback = frame_sizes[-1]
        # tier i upsamples by frame_sizes[i] / frame_sizes[i - 1] (the bottom tier by its own frame size)
        ratios = [frame_sizes[0]] + [b // a for a, b in itertools.pairwise(frame_sizes)]
        self.frame_level_rnns = nn.ModuleList(
            FrameLevelRNN(ratio, n_frame_samples, n_rnn, dim)
            for ratio, n_frame_samples in zip(ratios, frame_sizes, strict=True)
        )
        self.sample_level_mlp = SampleLevelMLP(frame_sizes[0], dim)

    def forward(self, input_sequences, hidden_states):
        batch_size = input_sequences.size(0)
        upper_tier_conditioning = None
        new_hidden = {}
        for i, rnn in reversed(list(enumerate(self.frame_level_rnns))):
            from_index = self.lookback - rnn.n_frame_samples
            to_index = -rnn.n_frame_samples + 1
            prev_samples = 2 * linear_dequantize(input_sequences[:, from_index:to_index])
            prev_samples = prev_samples.contiguous().view(batch_size, -1, rnn.n_frame_samples)
            upper_tier_conditioning, new_hidden[i] = rnn(
                prev_samples, upper_tier_conditioning, hidden_states.get(i)
            )
        mlp_input_sequences = input_sequences[:, self.lookback - self.sample_level_mlp.frame_size :]
        return self.sample_level_mlp(mlp_input_sequences, upper_tier_conditioning), new_hidden


def make_waves(n, length):
    t = torch.arange(length, device=device).float() / 16000
    freqs = 110 * 2 ** (torch.randint(0, 36, (n, 3), device=device).float() / 12)
    amps = torch.rand(n, 3, 1, device=device) * 0.3
    wave = (amps * torch.sin(2 * math.pi * freqs[:, :, None] * t)).sum(1)
    return linear_quantize(wave + 0.02 * torch.randn_like(wave))


model = SampleRNN().to(device)
ema = copy.deepcopy(model).requires_grad_(False)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
seq_len, chunk = 4096, 1024
lookback = model.lookback
train = make_waves(256, seq_len + lookback)
valid = make_waves(32, seq_len + lookback)
print(sum(p.numel() for p in model.parameters()), "parameters")
report("model, ema copy and quantised waveforms")

model.train()
batch_size = 64
for b in range(2):
    batch = train[b * batch_size : (b + 1) * batch_size]
    hidden = {}  # reset the tiers' states at the start of every batch of sequences
    for c in range(seq_len // chunk):
        inputs = batch[:, c * chunk : c * chunk + chunk + lookback - 1]
        targets = batch[:, c * chunk + lookback : c * chunk + chunk + lookback]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            log_probs, hidden = model(inputs, hidden)
            loss = F.nll_loss(log_probs.view(-1, q_levels).float(), targets.reshape(-1))
        hidden = {k: h.detach() for k, h in hidden.items()}
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters(), strict=True):
                e.lerp_(p, 1 - 0.999)
        print(f"batch {b} chunk {c} nll {loss.item():.4f}")
del log_probs, loss, hidden
report("TBPTT training, bf16 autocast")

model.eval()
with torch.no_grad():
    log_probs, _ = model(valid[:, :-1], {})
    nll = F.nll_loss(log_probs.view(-1, q_levels), valid[:, lookback:].reshape(-1))
print("valid bits per sample", (nll / math.log(2)).item())
del log_probs, nll
report("validation NLL in fp32 under no_grad")


@torch.inference_mode()
def generate(net, n_seqs, n_samples):
    q_zero = q_levels // 2
    sequences = torch.full((n_seqs, net.lookback + n_samples), q_zero, dtype=torch.long, device=device)
    frame_level_outputs = [None for _ in net.frame_level_rnns]
    hidden = [None for _ in net.frame_level_rnns]
    bottom_frame_size = net.frame_level_rnns[0].frame_size
    for i in range(net.lookback, net.lookback + n_samples):
        for tier_index, rnn in reversed(list(enumerate(net.frame_level_rnns))):
            if i % rnn.n_frame_samples != 0:
                continue
            prev_samples = 2 * linear_dequantize(sequences[:, i - rnn.n_frame_samples : i]).unsqueeze(1)
            if tier_index == len(net.frame_level_rnns) - 1:
                upper = None
            else:
                frame_index = (i // rnn.n_frame_samples) % net.frame_level_rnns[tier_index + 1].frame_size
                upper = frame_level_outputs[tier_index + 1][:, frame_index, :].unsqueeze(1)
            frame_level_outputs[tier_index], hidden[tier_index] = rnn(prev_samples, upper, hidden[tier_index])
        prev_samples = sequences[:, i - net.sample_level_mlp.frame_size : i]
        upper = frame_level_outputs[0][:, i % bottom_frame_size, :].unsqueeze(1)
        sample_dist = net.sample_level_mlp(prev_samples, upper).squeeze(1).float().exp_()
        sequences[:, i] = sample_dist.multinomial(1).squeeze(1)
    return sequences[:, net.lookback :]


ema.eval()
with torch.autocast("cuda", dtype=torch.bfloat16):
    clips = generate(ema, 32, 768)
audio = linear_dequantize(clips).cpu()
print("generated", tuple(audio.shape))
report("sample-by-sample generation under inference_mode")
