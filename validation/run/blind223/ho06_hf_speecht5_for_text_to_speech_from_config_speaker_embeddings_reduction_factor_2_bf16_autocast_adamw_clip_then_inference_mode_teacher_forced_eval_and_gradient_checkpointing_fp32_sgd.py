"""HF transformers SpeechT5ForTextToSpeech built from its default config (12 encoder + 6 decoder layers,
d 768, relative position bias in the encoder, speech decoder prenet with dropout always on, x-vector
speaker embeddings of 512 concatenated in the prenet, reduction factor 2, a 5-layer conv postnet; no
pretrained files, no tokenizer: random token ids over the 81-symbol vocabulary).

Training with labels (80-bin mels padded to a multiple of the reduction factor, the model's own
L1 + BCE stop loss), bf16 autocast, AdamW (lr 1e-4) with gradient clipping, batch 16, 128 tokens, 400
frames. Phases: 3 training steps; a teacher-forced evaluation under inference_mode at batch 32 (the
model's fixed-size forward, not generate(), whose length follows the stop token); gradient checkpointing
enabled, 3 fp32 steps with SGD momentum. 3 phases."""

import os

import torch
from transformers import SpeechT5Config, SpeechT5ForTextToSpeech

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2236)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, T_TXT, T_MEL = (2, 16, 32) if SMALL else (16, 128, 400)


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
              f"reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


cfg = SpeechT5Config()
if SMALL:
    cfg = SpeechT5Config(hidden_size=64, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=128,
                         decoder_ffn_dim=128, encoder_attention_heads=2, decoder_attention_heads=2)
model = SpeechT5ForTextToSpeech(cfg).to(device)
print("params", sum(p.numel() for p in model.parameters()))


def batch(b):
    ids = torch.randint(4, cfg.vocab_size, (b, T_TXT), device=device)
    att = torch.ones(b, T_TXT, dtype=torch.long, device=device)
    att[b // 2:, T_TXT * 3 // 4:] = 0
    labels = torch.randn(b, T_MEL, cfg.num_mel_bins, device=device)
    spk = torch.nn.functional.normalize(torch.randn(b, cfg.speaker_embedding_dim, device=device), dim=-1)
    return ids, att, labels, spk


opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
model.train()
for step in range(3):
    ids, att, labels, spk = batch(B)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=att, labels=labels, speaker_embeddings=spk)
    opt.zero_grad(set_to_none=True)
    out.loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(f"step {step} loss {out.loss.item():.4f} grad norm {gn.item():.3f}")
    del out
report("train_bf16_adamw")

model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    ids, att, labels, spk = batch(2 * B)
    out = model(input_ids=ids, attention_mask=att, labels=labels, speaker_embeddings=spk)
    print("eval loss", out.loss.item(), tuple(out.spectrogram.shape))
    del out
report("eval_inference_mode")

del opt
model.train()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
for step in range(3):
    ids, att, labels, spk = batch(B)
    out = model(input_ids=ids, attention_mask=att, labels=labels, speaker_embeddings=spk)
    opt.zero_grad(set_to_none=True)
    out.loss.backward()
    opt.step()
    print(f"ckpt step {step} loss {out.loss.item():.4f}")
    del out
report("train_fp32_checkpointing_sgd")
