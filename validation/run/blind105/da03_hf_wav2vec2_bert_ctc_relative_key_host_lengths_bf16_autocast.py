"""Speech recognition fine-tuning with HF transformers Wav2Vec2-BERT (a conformer over stacked
log-mel features: relative-key position embeddings, depthwise convolution modules, SpecAugment
time masks from numpy on the host, layerdrop 0.1), built from a config at 12 layers, 768 wide, 12
heads, a 40-symbol CTC vocabulary; batch 8 of up to 800 frames of 160 features, lengths drawn on
the host (attention mask and -100-padded transcripts built there, then copied), AdamW under bf16
autocast for 3 steps, then greedy CTC decoding of the batch under torch.inference_mode; 4 phases."""

import os

import torch
from transformers import Wav2Vec2BertConfig, Wav2Vec2BertForCTC

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10503)
if SMALL:
    cfg = Wav2Vec2BertConfig(
        vocab_size=40,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        conv_depthwise_kernel_size=7,
        mask_time_length=4,
    )
    B, T, STEPS = 3, 60, 2
else:
    cfg = Wav2Vec2BertConfig(
        vocab_size=40,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
    )
    B, T, STEPS = 8, 800, 3
cfg.ctc_loss_reduction = "mean"
cfg.pad_token_id = 0
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Wav2Vec2BertForCTC(cfg).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=5e-5)


def make_batch():
    lengths = torch.randint(T // 2, T + 1, (B,))
    lengths[0] = T
    feats = torch.randn(B, T, cfg.feature_projection_input_dim)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    feats = feats * mask[..., None]
    label_lens = (lengths // 8).tolist()
    labels = torch.full((B, max(label_lens)), -100, dtype=torch.long)
    for i, n in enumerate(label_lens):
        labels[i, :n] = torch.randint(1, cfg.vocab_size, (n,))
    return feats.to(device), mask.to(device), labels.to(device)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    feats, mask, labels = make_batch()
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(input_features=feats, attention_mask=mask, labels=labels)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del feats, mask, labels, out
model.eval()
with torch.inference_mode():
    feats, mask, labels = make_batch()
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(input_features=feats, attention_mask=mask).logits
    ids = logits.argmax(-1)
    keep = torch.ones_like(ids, dtype=torch.bool)
    keep[:, 1:] = ids[:, 1:] != ids[:, :-1]
    keep &= ids != cfg.pad_token_id
    n_tokens = keep.sum().item()
if device == "cuda":
    print(
        f"decode {n_tokens} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
