"""CTC fine-tuning of a WavLM-large-sized WavLMForCTC built from a WavLMConfig (1,024 wide, 24 layers, 16
heads, FFN 4,096, layer-norm feature encoder and stable (pre-) layer norm as wavlm-large, gated relative
position bias with 320 buckets; 32-character vocabulary; random init), the way the ASR fine-tuning
tutorials do: `freeze_feature_encoder()`, padded batches of 16 kHz waveforms of different lengths with an
`attention_mask` (zeros past each clip's end), labels padded with -100, the model's own SpecAugment time
masks (mask_time_prob 0.05), fp16 `torch.autocast` with `torch.amp.GradScaler` (init_scale 128, as
fairseq's fp16 fine-tuning), AdamW with a linear warm-up.

Then the feature encoder unfrozen with `gradient_checkpointing_enable()` (the whole model trains, the
transformer layers recompute in backward), and last a batch transcribed under `inference_mode` and fp16
autocast with greedy CTC decoding (argmax, collapse repeats, drop blanks) on the host.

Phases: 0 model and optimizer; 1 three frozen-encoder steps (batch 8, 6-10 s clips); 2 two unfrozen
steps with checkpointing (same batch shape); 3 inference, batch 12 of 5.6-10 s clips. Seeded; no sizes
depend on values."""

import os

import numpy as np
import torch
from transformers import WavLMConfig, WavLMForCTC

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(351_01)
np.random.seed(351_01)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    D, L, H, FF = 64, 2, 4, 128
    TRAIN_SECS = [1.0, 0.75, 0.9]
    EVAL_SECS = [0.5, 0.8]
else:
    D, L, H, FF = 1024, 24, 16, 4096
    TRAIN_SECS = [10.0, 9.6, 9.0, 8.6, 8.0, 7.4, 6.8, 6.0]
    EVAL_SECS = [10.0, 9.6, 9.2, 8.8, 8.4, 8.0, 7.6, 7.2, 6.8, 6.4, 6.0, 5.6]
SR = 16000
VOCAB = 32

config = WavLMConfig(
    vocab_size=VOCAB,
    hidden_size=D,
    num_hidden_layers=L,
    num_attention_heads=H,
    intermediate_size=FF,
    feat_extract_norm="layer",
    do_stable_layer_norm=True,
    conv_bias=True,
    layerdrop=0.0,
    mask_time_prob=0.05,
    mask_time_length=10,
    ctc_loss_reduction="mean",
    ctc_zero_infinity=True,
    pad_token_id=0,
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


model = WavLMForCTC(config).to(device)
model.freeze_feature_encoder()
model.train()
optimizer = torch.optim.AdamW([p for p in model.parameters()], lr=3e-5, weight_decay=0.005)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 500))
scaler = torch.amp.GradScaler(device, init_scale=128.0, enabled=cuda)
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 WavLMForCTC built, feature encoder frozen")


def batch(secs, with_labels=True):
    lengths = [int(s * SR) for s in secs]
    longest = max(lengths)
    wave = torch.zeros(len(lengths), longest, device=device)
    mask = torch.zeros(len(lengths), longest, dtype=torch.long, device=device)
    for i, n in enumerate(lengths):
        x = torch.randn(n, device=device)
        wave[i, :n] = (x - x.mean()) / (x.std() + 1e-7)
        mask[i, :n] = 1
    if not with_labels:
        return wave, mask, None
    # about 15 characters a second, padded with -100 as DataCollatorCTCWithPadding does
    n_chars = [int(s * 15) for s in secs]
    labels = torch.full((len(secs), max(n_chars)), -100, dtype=torch.long, device=device)
    for i, n in enumerate(n_chars):
        labels[i, :n] = torch.randint(1, VOCAB, (n,), device=device)
    return wave, mask, labels


def train_step(wave, mask, labels):
    with torch.autocast(device, dtype=torch.float16, enabled=cuda):
        out = model(wave, attention_mask=mask, labels=labels)
    scaler.scale(out.loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return out.loss.detach()


for step in range(3):
    loss = train_step(*batch(TRAIN_SECS))
    print(f"frozen encoder step {step}: loss {loss.item():.3f}")
report("phase1 three CTC steps, frozen feature encoder, fp16 autocast + GradScaler")

for p in model.wavlm.feature_extractor.parameters():
    p.requires_grad_(True)
model.wavlm.feature_extractor._requires_grad = True
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
for step in range(2):
    loss = train_step(*batch(TRAIN_SECS))
    print(f"unfrozen step {step}: loss {loss.item():.3f}")
report("phase2 two CTC steps, whole model, gradient checkpointing")

model.eval()
wave, mask, _ = batch(EVAL_SECS, with_labels=False)
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16, enabled=cuda):
    logits = model(wave, attention_mask=mask).logits
    frames = model.wavlm._get_feat_extract_output_lengths(mask.sum(-1))
    ids = logits.argmax(-1).cpu()
frames = frames.cpu().tolist()
texts = []
for row, n in zip(ids, frames, strict=True):
    row = torch.unique_consecutive(row[:n])
    texts.append(row[row != config.pad_token_id].tolist())
print(f"transcribed {len(texts)} clips, logits {tuple(logits.shape)}")
del logits, wave, mask
report("phase3 inference_mode greedy CTC, batch 12")
