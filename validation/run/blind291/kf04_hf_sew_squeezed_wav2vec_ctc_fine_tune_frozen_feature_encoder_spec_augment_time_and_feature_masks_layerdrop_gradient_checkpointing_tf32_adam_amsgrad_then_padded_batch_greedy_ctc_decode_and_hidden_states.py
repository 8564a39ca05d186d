"""Speech recognition with HF SEW (squeezed and efficient wav2vec, model_type "sew"): SEWForCTC from a
SEWConfig (its default 13-layer convolutional feature encoder with group norm, 768 wide, 12 layers,
squeeze factor 2, 32 characters) fine-tuned with CTC: the feature encoder frozen
(freeze_feature_encoder), SpecAugment time masks (mask_time_prob 0.08) and feature masks
(mask_feature_prob 0.05), layerdrop 0.1, gradient checkpointing, TF32 matmuls, fp32 weights,
Adam (amsgrad), batches of 8 clips of 6 to 12 s at 16 kHz padded with an attention mask, transcripts
padded with -100; 3 steps. Then eval: greedy CTC decoding (argmax, collapse repeats and blanks on the
host) of a padded batch of 12 clips under no_grad, and the per-layer hidden states of a 20 s clip.

Phases: 0 model and optimizer built; 1 first step; 2 two more steps; 3 batched greedy decoding;
4 long clip with output_hidden_states."""

import os

import torch
from transformers import SEWConfig, SEWForCTC

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2914)
torch.backends.cuda.matmul.allow_tf32 = True
if SMALL:
    config = SEWConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        conv_dim=(16, 16, 16),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16,
    )
    B, SR, MIN_S, MAX_S, EB, LONG, L = 2, 1600, 1, 2, 2, 3, 12
else:
    config = SEWConfig()
    B, SR, MIN_S, MAX_S, EB, LONG, L = 8, 16000, 6, 12, 12, 20, 120
config.vocab_size = 32
config.pad_token_id = 0
config.ctc_loss_reduction = "mean"
config.ctc_zero_infinity = True
config.mask_time_prob, config.mask_time_length = 0.08, 10
config.mask_feature_prob, config.mask_feature_length = 0.05, 16
config.layerdrop = 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def clips(n, lo, hi):
    secs = torch.linspace(lo, hi, n)
    samples = (secs * SR).long()
    audio = torch.zeros(n, int(samples.max()))
    mask = torch.zeros(n, audio.shape[1], dtype=torch.long)
    for i, s in enumerate(samples.tolist()):
        audio[i, :s] = torch.randn(s) * 0.1
        mask[i, :s] = 1
    return audio, mask


model = SEWForCTC(config).to(device)
model.freeze_feature_encoder()
model.gradient_checkpointing_enable()
optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-5, amsgrad=True)
report("built")

model.train()
for step in range(3):
    audio, amask = clips(B, MIN_S, MAX_S)
    lab_len = torch.randint(L // 2, L + 1, (B,))
    labels = torch.randint(1, config.vocab_size, (B, L))
    labels = labels.masked_fill(torch.arange(L)[None, :] >= lab_len[:, None], -100)
    out = model(input_values=audio.to(device), attention_mask=amask.to(device), labels=labels.to(device))
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, audio, amask, labels
    if step == 0:
        report("step0")
report("steps1-2")

model.eval()
with torch.no_grad():
    audio, amask = clips(EB, MIN_S // 2, MAX_S)
    logits = model(input_values=audio.to(device), attention_mask=amask.to(device)).logits
    pred = logits.argmax(-1).cpu()
texts = []
for row in pred.tolist():
    out, prev = [], None
    for t in row:
        if t != prev and t != config.pad_token_id:
            out.append(t)
        prev = t
    texts.append(out)
print("decoded lengths", [len(t) for t in texts])
del logits, audio, amask
report("decode")

with torch.no_grad():
    audio = torch.randn(1, LONG * SR) * 0.1
    out = model(input_values=audio.to(device), output_hidden_states=True)
    norms = torch.stack([h.float().norm(dim=-1).mean() for h in out.hidden_states]).cpu()
print("hidden states", len(out.hidden_states), tuple(out.hidden_states[-1].shape), norms.shape)
del out
report("hidden_states")
