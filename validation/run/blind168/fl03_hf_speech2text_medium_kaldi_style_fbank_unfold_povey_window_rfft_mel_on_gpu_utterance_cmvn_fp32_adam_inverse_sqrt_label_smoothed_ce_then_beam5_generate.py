"""Speech2Text (fairseq S2T) ASR training as its user writes it, from Speech2TextConfig at
s2t-medium's size (eager attention, 512 wide, 12 encoder and 6 decoder layers, 8 heads, feed-forward
2,048, the two-layer Conv1d subsampler of kernel 5 and 1,024 channels over 80 filterbank features, a 10,000
unigram vocabulary; fp32), the features computed on the GPU the Kaldi way by hand: 16 kHz seeded
noise, frames of 400 samples every 160 by Tensor.unfold (snip_edges), DC offset removal,
pre-emphasis 0.97, the povey window (hann^0.85), torch.fft.rfft padded to 512, the power spectrum
through an 80-band HTK mel filterbank matmul, log with a floor, then utterance-level CMVN over the
valid frames. Batches of 24 utterances of 3 to 12 s (padded, with the frame attention_mask), targets
of 20 to 60 tokens padded with the pad id; the loss is fairseq's label-smoothed cross entropy (eps
0.1) written by hand over the decoder's logits (log_softmax, gather, mean over the non-pad tokens);
Adam (betas 0.9/0.98, lr 2e-3) with the inverse-sqrt schedule (4 warmup steps here), clip_grad_norm_
at 10; 4 steps (the first its own phase); then the loss of 48 utterances at batch 24 under no_grad;
then beam search (5 beams, 32 new tokens exactly) for 8 utterances under inference_mode; 4 phases."""

import math
import os

import torch
import torch.nn.functional as F
from transformers import Speech2TextConfig, Speech2TextForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16803)
if SMALL:
    config = Speech2TextConfig(
        vocab_size=200,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        conv_channels=32,
        max_source_positions=600,
        max_target_positions=64,
    )
    B, SEC_MIN, SEC_MAX, T_MIN, T_MAX, STEPS, EVAL_N, GEN_B, BEAMS, NEW = 2, 1.0, 2.0, 4, 8, 2, 4, 2, 2, 5
else:
    config = Speech2TextConfig(
        vocab_size=10000,
        d_model=512,
        encoder_layers=12,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        conv_channels=1024,
        max_source_positions=6000,
        max_target_positions=1024,
    )
    B, SEC_MIN, SEC_MAX, T_MIN, T_MAX, STEPS, EVAL_N, GEN_B, BEAMS, NEW = (
        24,
        3.0,
        12.0,
        20,
        60,
        4,
        48,
        8,
        5,
        32,
    )
PAD, BOS, EOS = config.pad_token_id, config.bos_token_id, config.eos_token_id
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Speech2TextForConditionalGeneration(config).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.98), eps=1e-8)
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: min((s + 1) / 4, math.sqrt(4) / math.sqrt(s + 1))
)
gen = torch.Generator().manual_seed(16803)


def mel_filterbank(n_mels=80, n_fft=512, sr=16000, fmin=20.0, fmax=8000.0):
    def hz_to_mel(f):
        return 1127.0 * math.log(1.0 + f / 700.0)

    mel_lo, mel_hi = hz_to_mel(fmin), hz_to_mel(fmax)
    mels = torch.linspace(mel_lo, mel_hi, n_mels + 2)
    hz = 700.0 * (torch.exp(mels / 1127.0) - 1.0)
    bins = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    lower = (bins[None, :] - hz[:-2, None]) / (hz[1:-1, None] - hz[:-2, None])
    upper = (hz[2:, None] - bins[None, :]) / (hz[2:, None] - hz[1:-1, None])
    return torch.clamp(torch.minimum(lower, upper), min=0.0)  # (n_mels, n_fft // 2 + 1)


mel_fb = mel_filterbank().to(device)
window = torch.hann_window(400, periodic=False, device=device).pow(0.85)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def fbank(wave, lengths):
    frames = wave.unfold(-1, 400, 160)  # (B, T, 400)
    frames = frames - frames.mean(dim=-1, keepdim=True)
    frames = torch.cat([frames[..., :1] * (1 - 0.97), frames[..., 1:] - 0.97 * frames[..., :-1]], dim=-1)
    spec = torch.fft.rfft(frames * window, n=512).abs().pow(2.0)  # (B, T, 257)
    feats = torch.matmul(spec, mel_fb.t()).clamp(min=1.1920929e-07).log()
    n_frames = torch.tensor([1 + (ln - 400) // 160 for ln in lengths], device=device)
    mask = (torch.arange(feats.shape[1], device=device)[None, :] < n_frames[:, None]).long()
    m = mask[..., None].float()
    mean = (feats * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)
    var = ((feats - mean) ** 2 * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)
    feats = (feats - mean) / torch.sqrt(var + 1e-10) * m
    return feats, mask


def batch(n):
    lengths = [int(16000 * (SEC_MIN + (SEC_MAX - SEC_MIN) * i / max(n - 1, 1))) for i in range(n)][::-1]
    wave = torch.zeros(n, max(lengths))
    for i, ln in enumerate(lengths):
        wave[i, :ln] = 0.05 * torch.randn(ln, generator=gen)
    feats, mask = fbank(wave.to(device), lengths)
    n_tok = [T_MAX - (T_MAX - T_MIN) * i // max(n - 1, 1) for i in range(n)]
    labels = torch.full((n, max(n_tok)), PAD, dtype=torch.long)
    for i, k in enumerate(n_tok):
        labels[i, : k - 1] = torch.randint(4, config.vocab_size, (k - 1,), generator=gen)
        labels[i, k - 1] = EOS
    labels = labels.to(device)
    prev = torch.cat([torch.full((n, 1), EOS, device=device), labels[:, :-1]], dim=1)
    prev = prev.masked_fill(prev == PAD, PAD)
    return feats, mask, labels, prev


def label_smoothed_nll_loss(logits, target, eps=0.1, ignore_index=PAD):
    lprobs = F.log_softmax(logits.float(), dim=-1)
    target = target.unsqueeze(-1)
    nll_loss = -lprobs.gather(dim=-1, index=target)
    smooth_loss = -lprobs.sum(dim=-1, keepdim=True)
    pad_mask = target.eq(ignore_index)
    nll_loss = nll_loss.masked_fill(pad_mask, 0.0)
    smooth_loss = smooth_loss.masked_fill(pad_mask, 0.0)
    eps_i = eps / (lprobs.size(-1) - 1)
    loss = (1.0 - eps - eps_i) * nll_loss.sum() + eps_i * smooth_loss.sum()
    return loss / (~pad_mask).sum()


model.train()
for step in range(STEPS):
    feats, mask, labels, prev = batch(B)
    logits = model(
        input_features=feats,
        attention_mask=mask,
        decoder_input_ids=prev,
        decoder_attention_mask=(labels != PAD).long(),
    ).logits
    loss = label_smoothed_nll_loss(logits, labels)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} frames {feats.shape[1]} loss {loss.item():.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del feats, mask, labels, prev, logits, loss

model.eval()
total = 0.0
with torch.no_grad():
    for _ in range(EVAL_N // B):
        feats, mask, labels, prev = batch(B)
        logits = model(input_features=feats, attention_mask=mask, decoder_input_ids=prev).logits
        total += label_smoothed_nll_loss(logits, labels).item()
print(f"eval loss {total / (EVAL_N // B):.4f}")
del feats, mask, labels, prev, logits
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    feats, mask, _, _ = batch(GEN_B)
    out = model.generate(
        input_features=feats,
        attention_mask=mask,
        num_beams=BEAMS,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        early_stopping=True,
    )
print(f"generate {tuple(out.shape)}")
if device == "cuda":
    print(
        f"generate allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
