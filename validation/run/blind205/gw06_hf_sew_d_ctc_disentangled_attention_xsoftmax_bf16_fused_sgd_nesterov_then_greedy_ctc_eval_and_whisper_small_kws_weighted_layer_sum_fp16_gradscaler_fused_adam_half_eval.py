"""Two speech encoders from transformers configs (no download): SEW-D for CTC, then Whisper for keyword spotting.

SEWDForCTC at SEW-D's default size: a 13-layer conv feature encoder (64 to 512 channels, GroupNorm after
the first), the sequence squeezed 2x (strided Conv1d) before 12 DeBERTa-v2 layers of 768 with disentangled
attention (c2p and p2c over 256 relative position buckets, shared keys, the XSoftmax and XDropout custom
autograd Functions), upsampled back after; SpecAugment on (numpy seeded). 16 utterances of 8 to 15 s of
random 16 kHz audio, zero padded without an attention mask (as for the group-norm feature encoders), labels
of 40 to 160 characters padded with -100, CTC mean loss with zero_infinity.

Training: bf16 autocast, fused SGD (momentum 0.9, nesterov, lr 1e-3), clipping at 1.0, a linear warmup by
LambdaLR. Then greedy CTC decoding under inference_mode.

WhisperForAudioClassification from WhisperConfig at whisper-small's encoder size (12 layers of 768, 12
heads, 80 mel bins over Whisper's fixed 3,000 frames: 1-s keyword clips padded to 30 s) with a weighted
sum of all hidden states and a 256-dim projection to 35 classes (Speech Commands' keywords); fp16 autocast
with GradScaler and fused Adam, batch 32; then evaluation of a .half() copy under inference_mode, batch 64.

Phases: SEW-D's first step; 3 more steps; greedy CTC evaluation; Whisper keyword spotting, 3 steps; its
fp16 evaluation. 5 phases."""

import os

import numpy as np
import torch
from transformers import SEWDConfig, SEWDForCTC, WhisperConfig, WhisperForAudioClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2056)
np.random.seed(2056)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

if SMALL:
    sew_cfg = SEWDConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        conv_dim=(16,) * 13,
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        position_buckets=16,
        max_position_embeddings=64,
        ctc_zero_infinity=True,
    )
    wh_cfg = WhisperConfig(
        d_model=64,
        encoder_layers=2,
        encoder_attention_heads=2,
        encoder_ffn_dim=128,
        num_mel_bins=80,
        max_source_positions=1500,
        num_labels=35,
        use_weighted_layer_sum=True,
        classifier_proj_size=32,
    )
    BATCH, MIN_S, MAX_S, MIN_T, MAX_T, KWS_B, EVAL_B = 2, 16000, 24000, 5, 10, 2, 2
else:
    sew_cfg = SEWDConfig(ctc_zero_infinity=True, layerdrop=0.0)
    wh_cfg = WhisperConfig(
        d_model=768,
        encoder_layers=12,
        encoder_attention_heads=12,
        encoder_ffn_dim=3072,
        decoder_layers=12,
        decoder_attention_heads=12,
        decoder_ffn_dim=3072,
        num_mel_bins=80,
        num_labels=35,
        use_weighted_layer_sum=True,
        classifier_proj_size=256,
    )
    BATCH, MIN_S, MAX_S, MIN_T, MAX_T, KWS_B, EVAL_B = 16, 128000, 240000, 40, 160, 32, 64


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


gen = torch.Generator().manual_seed(56)


def ctc_batch():
    n = torch.randint(MIN_S, MAX_S + 1, (BATCH,), generator=gen)
    n[0] = MAX_S
    wave = torch.randn(BATCH, MAX_S, generator=gen) * (torch.arange(MAX_S)[None] < n[:, None])
    t_len = torch.randint(MIN_T, MAX_T + 1, (BATCH,), generator=gen)
    labels = torch.full((BATCH, int(t_len.max())), -100, dtype=torch.long)
    for i, t in enumerate(t_len.tolist()):
        labels[i, :t] = torch.randint(3, sew_cfg.vocab_size, (t,), generator=gen)
    return wave.to(device), labels.to(device)


sew = SEWDForCTC(sew_cfg).to(device)
print(f"SEW-D params {sum(p.numel() for p in sew.parameters()) / 1e6:.1f}M")
opt = torch.optim.SGD(sew.parameters(), lr=1e-3, momentum=0.9, nesterov=True, fused=amp)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))


def sew_step():
    wave, labels = ctc_batch()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = sew(wave, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(sew.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


sew.train()
print(f"SEW-D step 0 loss {sew_step():.4f}")
report("sew-d first step")
for _ in range(3):
    loss = sew_step()
print(f"SEW-D step 3 loss {loss:.4f}")
report("sew-d train")

sew.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    wave, labels = ctc_batch()
    out = sew(wave, labels=labels)
    pred = out.logits.argmax(-1)
    print(
        f"SEW-D eval loss {out.loss.item():.4f}, {(pred != sew_cfg.pad_token_id).sum().item()} non-blank frames"
    )
report("sew-d eval")

del sew, opt, sched, out, pred, wave, labels
kws = WhisperForAudioClassification(wh_cfg).to(device)
print(f"Whisper KWS params {sum(p.numel() for p in kws.parameters()) / 1e6:.1f}M")
frames = 2 * wh_cfg.max_source_positions
kws_opt = torch.optim.Adam(kws.parameters(), lr=1e-4, fused=amp)
scaler = torch.amp.GradScaler("cuda", enabled=amp)


def kws_batch(batch):
    feats = torch.full((batch, 80, frames), -1.0)
    feats[:, :, :100] = torch.randn(batch, 80, 100, generator=gen)  # 1 s of speech, then padding
    return feats.to(device), torch.randint(0, 35, (batch,), generator=gen).to(device)


kws.train()
for step in range(3):
    feats, labels = kws_batch(KWS_B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = kws(feats, labels=labels).loss
    scaler.scale(loss).backward()
    scaler.step(kws_opt)
    scaler.update()
    kws_opt.zero_grad(set_to_none=True)
    print(f"KWS step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
report("whisper kws fp16")

kws_half = kws.half().eval()
del kws_opt, scaler
with torch.inference_mode():
    feats, labels = kws_batch(EVAL_B)
    logits = kws_half(feats.half()).logits
    print(f"KWS eval accuracy {(logits.argmax(-1) == labels).float().mean().item():.3f}")
report("whisper kws half eval")
