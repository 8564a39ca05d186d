"""HuBERT CTC fine-tuning after the fairseq / Hugging Face recipe (HubertForCTC from HubertConfig at
hubert-large's size: 1,024 wide, 24 layers, 16 heads, feed-forward 4,096, the layer-norm feature
encoder with conv_bias and do_stable_layer_norm, so the attention_mask is honoured; a 32-letter CTC
vocabulary with pad 0), the feature encoder frozen (freeze_feature_encoder), SpecAugment on
(mask_time_prob 0.065 over spans of 10, mask_feature_prob 0.012 over spans of 64: the masks drawn on
the host by numpy), layerdrop 0.1 (torch.rand on the host), gradient checkpointing, ctc_loss_reduction
"mean" with zero_infinity. Batches of 8 utterances of 6 to 15.6 s of zero-padded seeded noise with
their attention_mask, letter labels of 40 to 180 symbols padded with -100; bf16 autocast, fused AdamW
(lr 3e-5) with a tri-stage LambdaLR (warmup, hold, decay), clip_grad_norm_ at 1.0; 4 steps (the
first its own phase, then two, then one with the longest batch of 8 x 20 s); then a greedy CTC
evaluation (argmax over the logits, its input lengths from the attention mask) of 24 utterances at
batch 12 under inference_mode and bf16 autocast; 4 phases."""

import math
import os

import torch
from transformers import HubertConfig, HubertForCTC

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16802)
if SMALL:
    config = HubertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        conv_dim=(16, 16, 16, 16, 16, 16, 16),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
    )
    B, SEC_MIN, SEC_MAX, LONG, EVAL_N, EVAL_B = 2, 1.0, 1.6, 2.0, 4, 2
else:
    config = HubertConfig(
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
    )
    B, SEC_MIN, SEC_MAX, LONG, EVAL_N, EVAL_B = 8, 6.0, 15.6, 20.0, 24, 12
config.vocab_size = 32
config.pad_token_id = 0
config.feat_extract_norm = "layer"
config.conv_bias = True
config.do_stable_layer_norm = True
config.feat_proj_dropout = 0.1
config.hidden_dropout = 0.1
config.attention_dropout = 0.1
config.final_dropout = 0.1
config.layerdrop = 0.1
config.mask_time_prob = 0.065
config.mask_time_length = 10
config.mask_feature_prob = 0.012
config.mask_feature_length = 64 if not SMALL else 4
config.apply_spec_augment = True
config.ctc_loss_reduction = "mean"
config.ctc_zero_infinity = True
device = "cuda" if torch.cuda.is_available() else "cpu"
model = HubertForCTC(config).to(device)
model.freeze_feature_encoder()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(params, lr=3e-5, betas=(0.9, 0.98), eps=1e-8, fused=device == "cuda")


def tri_stage(step, warmup=10, hold=40, decay=50):
    if step < warmup:
        return 0.01 + 0.99 * step / warmup
    if step < warmup + hold:
        return 1.0
    return math.exp(math.log(0.05) * (step - warmup - hold) / decay)


scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, tri_stage)
gen = torch.Generator().manual_seed(16802)
print(f"trainable {sum(p.numel() for p in params)}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n, lo, hi):
    lengths = [int(16000 * (lo + (hi - lo) * i / max(n - 1, 1))) for i in range(n)]
    lengths = lengths[::-1]
    t = max(lengths)
    audio = torch.zeros(n, t)
    mask = torch.zeros(n, t, dtype=torch.long)
    for i, ln in enumerate(lengths):
        wav = torch.randn(ln, generator=gen) * 0.1
        audio[i, :ln] = (wav - wav.mean()) / (wav.std() + 1e-7)
        mask[i, :ln] = 1
    n_lab = [int(ln / 16000 * 11.5) for ln in lengths]
    labels = torch.full((n, max(n_lab)), -100, dtype=torch.long)
    for i, k in enumerate(n_lab):
        labels[i, :k] = torch.randint(1, config.vocab_size, (k,), generator=gen)
    return audio.to(device), mask.to(device), labels.to(device)


def train_step(step, lo, hi):
    audio, mask, labels = batch(B, lo, hi)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_values=audio, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} frames {audio.shape[1]} loss {loss.item():.4f}")


model.train()
for step in range(3):
    train_step(step, SEC_MIN, SEC_MAX)
    if device == "cuda" and step in (0, 2):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
train_step(3, LONG, LONG)
if device == "cuda":
    print(f"long peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
n_words = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(EVAL_N // EVAL_B):
        audio, mask, labels = batch(EVAL_B, SEC_MIN, SEC_MAX)
        logits = model(input_values=audio, attention_mask=mask).logits
        out_lengths = model._get_feat_extract_output_lengths(mask.sum(-1))
        pred = logits.argmax(dim=-1)
        for i in range(EVAL_B):
            ids = pred[i, : int(out_lengths[i])].tolist()
            n_words += sum(1 for a, b in zip(ids, [None, *ids[:-1]], strict=True) if a != b and a != 0)
print(f"eval symbols {n_words}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
