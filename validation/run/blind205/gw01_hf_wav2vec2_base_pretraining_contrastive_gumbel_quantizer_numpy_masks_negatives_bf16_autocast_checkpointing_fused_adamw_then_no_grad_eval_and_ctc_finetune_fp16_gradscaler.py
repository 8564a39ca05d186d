"""wav2vec 2.0 self-supervised pre-training from config, then CTC fine-tuning of the same encoder.

Wav2Vec2ForPreTraining at wav2vec2-base's size (7 strided Conv1d feature-encoder layers of 512 with a
GroupNorm after the first, 12 transformer layers of 768 with the convolutional relative position
embedding of kernel 128 and 16 groups, a Gumbel-softmax product quantizer of 2 groups x 320 entries,
100 distractors). Masks and distractors are drawn as in transformers' run_wav2vec2_pretraining_no_trainer
example: `_compute_mask_indices` (mask_prob 0.65, span 10) and `_sample_negative_indices` on numpy
(seeded), sent to the device as int64. The loss (contrastive cross-entropy plus 0.1 x diversity) is
divided by the number of masked frames; the Gumbel temperature decays every step.

Training: batch 8 x 15.6 s of 16 kHz random audio, bf16 autocast, gradient checkpointing
(model.gradient_checkpointing_enable(), which also checkpoints the conv feature encoder), fused AdamW
(lr 5e-4, betas 0.9/0.98, eps 1e-6, weight decay 0.01), clipping at 1.0.

Phases: the first step; 3 more steps; evaluation of the contrastive loss under no_grad in eval mode (the
quantizer's argmax path); then Wav2Vec2ForCTC over a 32-symbol vocabulary initialised from the
pre-trained encoder (load_state_dict, strict=False), feature encoder frozen, labels padded with -100,
fp16 autocast with GradScaler and foreach AdamW, 3 steps of 8 x 10 s. 4 phases."""

import os

import numpy as np
import torch
from transformers import Wav2Vec2Config, Wav2Vec2ForCTC, Wav2Vec2ForPreTraining
from transformers.models.wav2vec2.modeling_wav2vec2 import _compute_mask_indices, _sample_negative_indices

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(205)
np.random.seed(205)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

if SMALL:
    cfg = Wav2Vec2Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        conv_dim=(32,) * 7,
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        codevector_dim=32,
        proj_codevector_dim=32,
        num_negatives=10,
    )
    BATCH, SAMPLES, CTC_SAMPLES = 2, 16000, 16000
else:
    cfg = Wav2Vec2Config(
        mask_time_prob=0.65,
        mask_time_length=10,
        num_negatives=100,
        codevector_dim=256,
        proj_codevector_dim=256,
        diversity_loss_weight=0.1,
        feat_quantizer_dropout=0.0,
        layerdrop=0.0,
    )
    BATCH, SAMPLES, CTC_SAMPLES = 8, 250000, 160000


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = Wav2Vec2ForPreTraining(cfg).to(device)
model.gradient_checkpointing_enable()
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(
    model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01, fused=amp
)

frames = int(model._get_feat_extract_output_lengths(SAMPLES))
print(f"frames per utterance {frames}")


def batch_inputs():
    wave = torch.randn(BATCH, SAMPLES, device=device)
    wave = (wave - wave.mean(dim=-1, keepdim=True)) / torch.sqrt(wave.var(dim=-1, keepdim=True) + 1e-7)
    mask = _compute_mask_indices(
        (BATCH, frames), mask_prob=cfg.mask_time_prob, mask_length=cfg.mask_time_length, min_masks=2
    )
    negatives = _sample_negative_indices((BATCH, frames), cfg.num_negatives, mask_time_indices=mask)
    mask = torch.tensor(mask, device=device, dtype=torch.long)
    negatives = torch.tensor(negatives, device=device, dtype=torch.long)
    return wave, mask, negatives


max_temp, min_temp, decay = 2.0, 0.5, 0.999995
step_no = 0


def pretrain_step():
    global step_no
    wave, mask, negatives = batch_inputs()
    num_masked = mask.sum()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        out = model(wave, mask_time_indices=mask, sampled_negative_indices=negatives)
    loss = out.loss / num_masked
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    step_no += 1
    model.set_gumbel_temperature(max(max_temp * decay**step_no, min_temp))
    return loss.item(), out.contrastive_loss.item() / num_masked.item(), out.codevector_perplexity.item()


model.train()
loss, closs, ppl = pretrain_step()
print(f"step 0 loss {loss:.4f} contrastive {closs:.4f} perplexity {ppl:.1f}")
report("first step")
for _ in range(3):
    loss, closs, ppl = pretrain_step()
print(f"step 3 loss {loss:.4f} contrastive {closs:.4f} perplexity {ppl:.1f}")
report("pretrain")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    wave, mask, negatives = batch_inputs()
    out = model(wave, mask_time_indices=mask, sampled_negative_indices=negatives)
    cos = torch.cosine_similarity(
        out.projected_states.float(), out.projected_quantized_states.float(), dim=-1
    )
    print(
        f"eval loss {(out.loss / mask.sum()).item():.4f} masked cosine {cos[mask.bool()].mean().item():.4f}"
    )
report("eval")

ctc_cfg = Wav2Vec2Config(
    **{**cfg.to_dict(), "vocab_size": 32, "ctc_loss_reduction": "mean", "pad_token_id": 0}
)
ctc = Wav2Vec2ForCTC(ctc_cfg).to(device)
missing, unexpected = ctc.load_state_dict(model.state_dict(), strict=False)
print(f"ctc init: {len(missing)} missing, {len(unexpected)} unexpected")
del model, opt, out, wave, mask, negatives
ctc.freeze_feature_encoder()
ctc.train()
ctc_opt = torch.optim.AdamW([p for p in ctc.parameters() if p.requires_grad], lr=3e-5, foreach=True)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
gen = torch.Generator().manual_seed(7)
for step in range(3):
    wave = torch.randn(BATCH, CTC_SAMPLES, device=device)
    lengths = torch.randint(40, 120, (BATCH,), generator=gen)
    labels = torch.full((BATCH, int(lengths.max())), -100, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        labels[i, :n] = torch.randint(1, 32, (n,), generator=gen)
    labels = labels.to(device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = ctc(wave, labels=labels).loss
    scaler.scale(loss).backward()
    scaler.unscale_(ctc_opt)
    torch.nn.utils.clip_grad_norm_(ctc.parameters(), 1.0)
    scaler.step(ctc_opt)
    scaler.update()
    ctc_opt.zero_grad(set_to_none=True)
    print(f"ctc step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
report("ctc finetune")
