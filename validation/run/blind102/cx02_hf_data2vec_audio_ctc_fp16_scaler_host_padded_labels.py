"""HF Data2VecAudio (7-layer strided Conv1d feature encoder, grouped positional Conv1d stack,
4-layer encoder) fully fine-tuned for CTC from a config (no download): batch 6 of variable-length
16 kHz clips (1.6 s to 2.9 s, zero-padded, attention mask), character labels padded with -100 built
on the host and copied to the GPU, fp16 autocast with GradScaler, AdamW, gradient clipping;
3 training steps, then a greedy decode of 10 clips under inference_mode; 5 phases."""

import os

import torch
from transformers import Data2VecAudioConfig, Data2VecAudioForCTC

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10202)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, STEPS = (2, 2) if SMALL else (6, 3)
SR = 4000 if SMALL else 16000
cfg = Data2VecAudioConfig(
    vocab_size=40,
    hidden_size=128 if SMALL else 768,
    num_hidden_layers=2 if SMALL else 4,
    num_attention_heads=4 if SMALL else 12,
    intermediate_size=256 if SMALL else 3072,
    conv_dim=(64,) * 7 if SMALL else (512,) * 7,
    num_conv_pos_embeddings=5,
    num_conv_pos_embedding_groups=16,
    ctc_loss_reduction="mean",
    pad_token_id=0,
    mask_time_prob=0.05,
    layerdrop=0.0,
)
model = Data2VecAudioForCTC(cfg).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
gen = torch.Generator().manual_seed(7)


def batch(n):
    secs = torch.empty(n).uniform_(1.6, 2.9, generator=gen)
    lens = (secs * SR).long()
    T = int(lens.max())
    wav = torch.zeros(n, T)
    mask = torch.zeros(n, T, dtype=torch.long)
    for i, L in enumerate(lens.tolist()):
        wav[i, :L] = torch.randn(L, generator=gen) * 0.1
        mask[i, :L] = 1
    nlab = (secs * 12).long()
    labels = torch.full((n, int(nlab.max())), -100, dtype=torch.long)
    for i, L in enumerate(nlab.tolist()):
        labels[i, :L] = torch.randint(1, 40, (L,), generator=gen)
    return wav.to(device), mask.to(device), labels.to(device)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    wav, mask, labels = batch(B)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = model(wav, attention_mask=mask, labels=labels).loss
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del wav, mask, labels, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    wav, mask, _ = batch(B + 4)
    ids = model(wav, attention_mask=mask).logits.argmax(-1)
if device == "cuda":
    print(
        f"eval {ids.shape} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
