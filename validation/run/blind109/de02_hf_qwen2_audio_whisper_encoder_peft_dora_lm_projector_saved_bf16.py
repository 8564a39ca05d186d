"""HF Qwen2-Audio built from a config: its Whisper-like audio encoder (two Conv1d over 128 mel bins,
the second of stride 2, 8 layers of 768 wide, an average pool) feeding a Qwen2 language model (8
layers of 1024 wide, 16 heads, 4 KV heads, a 32,000-symbol vocabulary) through the projector; the
prompt holds one audio token per pooled frame of each clip (clips of host-given lengths, padded to
1,500 mel frames, the model's masked_scatter of the kept features). PEFT DoRA (rank 16) on the
language model's q/k/v/o projections, the projector trained whole (modules_to_save), bf16 weights,
AdamW, 3 steps on batches of 4 clips, then a no_grad pass over 8; 5 phases."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10902)
device = "cuda" if torch.cuda.is_available() else "cpu"
V = 500 if SMALL else 32000
AUDIO = V - 1
POS = 50 if SMALL else 750
cfg = Qwen2AudioConfig(
    audio_config=dict(
        num_mel_bins=128,
        encoder_layers=2 if SMALL else 8,
        encoder_attention_heads=4 if SMALL else 12,
        encoder_ffn_dim=128 if SMALL else 3072,
        d_model=64 if SMALL else 768,
        max_source_positions=POS,
    ),
    text_config=dict(
        model_type="qwen2",
        vocab_size=V,
        hidden_size=64 if SMALL else 1024,
        intermediate_size=128 if SMALL else 2816,
        num_hidden_layers=2 if SMALL else 8,
        num_attention_heads=4 if SMALL else 16,
        num_key_value_heads=2 if SMALL else 4,
        max_position_embeddings=4096,
    ),
    audio_token_index=AUDIO,
)
model = Qwen2AudioForConditionalGeneration(cfg).to(device, torch.bfloat16)
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    use_dora=True,
    target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj)",
    modules_to_save=["multi_modal_projector"],
)
model = get_peft_model(model, lora)
model.train()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)


def pooled(frames):
    return ((frames - 1) // 2 + 1 - 2) // 2 + 1


def batch(clips, text):
    n = len(clips)
    feats = torch.randn(n, 128, 2 * POS)
    fmask = torch.zeros(n, 2 * POS, dtype=torch.long)
    rows = []
    for i, f in enumerate(clips):
        feats[i, :, f:] = 0
        fmask[i, :f] = 1
        rows.append([1] + [AUDIO] * pooled(f) + torch.randint(3, V - 1, (text[i],)).tolist() + [2])
    width = max(len(r) for r in rows)
    ids = torch.zeros(n, width, dtype=torch.long)
    mask = torch.zeros(n, width, dtype=torch.long)
    labels = torch.full((n, width), -100, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
        labels[i, len(r) - text[i] - 1 : len(r)] = ids[i, len(r) - text[i] - 1 : len(r)]
    to = dict(device=device)
    return dict(
        input_ids=ids.to(**to),
        attention_mask=mask.to(**to),
        labels=labels.to(**to),
        input_features=feats.to(device, torch.bfloat16),
        feature_attention_mask=fmask.to(**to),
    )


TRAIN = (
    [([100, 64], [9, 5]), ([80, 33], [7, 12]), ([41, 100], [3, 8])]
    if SMALL
    else [
        ([1500, 1210, 977, 640], [60, 41, 88, 23]),
        ([700, 1500, 1488, 301], [17, 90, 64, 50]),
        ([1102, 896, 1500, 1333], [75, 33, 12, 101]),
    ]
)
EVAL = ([77, 100], [20, 4]) if SMALL else ([1500, 1400, 1200, 999, 820, 640, 1500, 260], [40] * 8)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step, (clips, text) in enumerate(TRAIN):
    loss = model(**batch(clips, text)).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss
model.eval()
with torch.no_grad():
    loss = model(**batch(*EVAL)).loss
if device == "cuda":
    print(
        f"eval {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
