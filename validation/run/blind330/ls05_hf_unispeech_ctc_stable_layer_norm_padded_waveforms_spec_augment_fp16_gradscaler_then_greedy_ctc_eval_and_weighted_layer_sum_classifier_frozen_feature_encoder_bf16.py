"""Speech recognition and keyword classification with Hugging Face UniSpeech built from configs (no
downloads): UniSpeechForCTC (stable-layer-norm variant, layer-norm conv feature encoder, 8 transformer
layers, SpecAugment time masks drawn with numpy, seeded) is trained on padded 16 kHz waveforms of
different lengths with an attention_mask and -100-padded character labels, under fp16 autocast with a
GradScaler and AdamW; then a held-out set is decoded greedily (argmax, blank/repeat masks, fixed shapes)
under inference_mode; finally UniSpeechForSequenceClassification (weighted layer sum over all hidden
states, frozen feature encoder) is trained for 12 keywords with bf16 autocast and evaluated after `.half()`.

Phases: 0 data; 1 CTC fp16 GradScaler training; 2 greedy CTC eval; 3 classifier bf16 training; 4 half eval."""

import os

import numpy as np
import torch
from transformers import UniSpeechConfig, UniSpeechForCTC, UniSpeechForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3305)
np.random.seed(3305)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    W, H, FF, L, SR_SEC, BS, STEPS, N_EVAL, CLS_BS, CLS_STEPS = 64, 4, 128, 2, 0.5, 2, 2, 4, 2, 2
else:
    W, H, FF, L, SR_SEC, BS, STEPS, N_EVAL, CLS_BS, CLS_STEPS = 768, 12, 3072, 8, 6.0, 8, 5, 32, 32, 5
SAMPLES = int(16000 * SR_SEC)
VOCAB, MAX_CHARS, N_KEYWORDS = 32, 90, 12


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def waveforms(n, samples):
    lens = torch.randint(samples // 2, samples + 1, (n,))
    mask = (torch.arange(samples)[None, :] < lens[:, None]).long()
    wav = torch.randn(n, samples) * 0.1 * mask
    return wav, mask


def char_labels(n):
    lens = torch.randint(MAX_CHARS // 3, MAX_CHARS + 1, (n,))
    labels = torch.randint(3, VOCAB, (n, MAX_CHARS))
    return labels.masked_fill(torch.arange(MAX_CHARS)[None, :] >= lens[:, None], -100)


common = dict(
    hidden_size=W,
    num_hidden_layers=L,
    num_attention_heads=H,
    intermediate_size=FF,
    feat_extract_norm="layer",
    do_stable_layer_norm=True,
    conv_bias=True,
    layerdrop=0.0,
)
train = [(*waveforms(BS, SAMPLES), char_labels(BS)) for _ in range(STEPS)]
report("data")

ctc = UniSpeechForCTC(
    UniSpeechConfig(
        **common, vocab_size=VOCAB, mask_time_prob=0.05, ctc_zero_infinity=True, ctc_loss_reduction="mean"
    )
).to(device)
opt = torch.optim.AdamW(ctc.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
ctc.train()
for wav, mask, labels in train:
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        out = ctc(input_values=wav.to(device), attention_mask=mask.to(device), labels=labels.to(device))
    scaler.scale(out.loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(ctc.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
print("ctc loss", round(out.loss.item(), 3))
del out, opt, scaler
report("CTC fp16 GradScaler training")

ctc.eval()
kept = []
with (
    torch.inference_mode(),
    torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"),
):
    for _i in range(0, N_EVAL, BS):
        wav, mask = waveforms(BS, SAMPLES)
        logits = ctc(input_values=wav.to(device), attention_mask=mask.to(device)).logits
        ids = logits.argmax(dim=-1)
        frames = ctc._get_feat_extract_output_lengths(mask.sum(-1)).to(device)
        valid = torch.arange(ids.shape[1], device=device)[None, :] < frames[:, None]
        repeat = torch.cat([torch.zeros_like(ids[:, :1], dtype=torch.bool), ids[:, 1:] == ids[:, :-1]], dim=1)
        kept.append(((ids != 0) & ~repeat & valid).sum(-1))
print("decoded lengths", torch.cat(kept)[:8].tolist())
del ctc, logits
report("greedy CTC eval")

clf = UniSpeechForSequenceClassification(
    UniSpeechConfig(**common, num_labels=N_KEYWORDS, use_weighted_layer_sum=True, mask_time_prob=0.0)
).to(device)
clf.freeze_feature_encoder()
opt = torch.optim.AdamW([p for p in clf.parameters() if p.requires_grad], lr=3e-5)
clf.train()
for _step in range(CLS_STEPS):
    wav, mask = waveforms(CLS_BS, 16000)
    y = torch.randint(0, N_KEYWORDS, (CLS_BS,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = clf(input_values=wav.to(device), attention_mask=mask.to(device), labels=y)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("keyword loss", round(out.loss.item(), 3))
del out
report("classifier bf16 training")

clf.eval().half()
with torch.inference_mode():
    wav, mask = waveforms(2 * CLS_BS, 16000)
    probs = (
        clf(input_values=wav.to(device, torch.float16), attention_mask=mask.to(device))
        .logits.float()
        .softmax(-1)
    )
print("keyword probs", tuple(probs.shape), probs.argmax(-1)[:8].tolist())
report("half eval")
