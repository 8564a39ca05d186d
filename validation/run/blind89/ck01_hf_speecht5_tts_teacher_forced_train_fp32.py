"""HF SpeechT5ForTextToSpeech (SpeechT5-base-like: 12-layer text encoder, 6-layer speech decoder
with the speech prenet and speaker-embedding projection, 80-bin mel postnet) built from its
config, trained in fp32 with AdamW on teacher-forced mel spectrograms: batch 8 of padded
character sequences (up to 160 tokens) and padded targets (up to 600 frames, reduction factor
2), x-vector speaker embeddings, L1 + BCE stop-token loss as the model computes it; 3 steps, then
an evaluation pass under torch.no_grad; 2 phases."""

import os

import torch
from transformers import SpeechT5Config, SpeechT5ForTextToSpeech

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8901)
if SMALL:
    config = SpeechT5Config(
        vocab_size=40,
        hidden_size=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        speech_decoder_prenet_units=32,
        speech_decoder_postnet_units=32,
        speech_decoder_postnet_layers=2,
        speaker_embedding_dim=16,
        num_mel_bins=8,
        conv_dim=(8, 8),
        conv_kernel=(3, 3),
        conv_stride=(2, 2),
        num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=2,
    )
    B, T_TEXT, T_MEL, STEPS = 2, 20, 30, 2
else:
    config = SpeechT5Config(vocab_size=81)
    B, T_TEXT, T_MEL, STEPS = 8, 160, 600, 3
device = "cuda" if torch.cuda.is_available() else "cpu"
model = SpeechT5ForTextToSpeech(config).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def batch():
    text_len = torch.randint(T_TEXT // 2, T_TEXT + 1, (B,))
    text_len[0] = T_TEXT
    ids = torch.randint(4, config.vocab_size, (B, T_TEXT))
    text_mask = torch.arange(T_TEXT)[None] < text_len[:, None]
    ids = ids.masked_fill(~text_mask, config.pad_token_id)
    mel_len = (text_len * T_MEL // T_TEXT) // 2 * 2
    mel = torch.randn(B, T_MEL, config.num_mel_bins)
    mel_mask = torch.arange(T_MEL)[None] < mel_len[:, None]
    mel = mel.masked_fill(~mel_mask[..., None], -100.0)  # ignored by the model's loss
    speakers = torch.nn.functional.normalize(torch.randn(B, config.speaker_embedding_dim), dim=-1)
    return (
        ids.to(device),
        text_mask.long().to(device),
        mel.to(device),
        mel_mask.long().to(device),
        speakers.to(device),
    )


model.train()
for _ in range(STEPS):
    ids, text_mask, mel, mel_mask, speakers = batch()
    out = model(
        input_ids=ids,
        attention_mask=text_mask,
        labels=mel,
        decoder_attention_mask=mel_mask[:, 1::2],
        speaker_embeddings=speakers,
    )
    opt.zero_grad(set_to_none=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
if device == "cuda":
    print(
        f"train loss {out.loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del out
model.eval()
with torch.no_grad():
    ids, text_mask, mel, mel_mask, speakers = batch()
    out = model(
        input_ids=ids,
        attention_mask=text_mask,
        labels=mel,
        decoder_attention_mask=mel_mask[:, 1::2],
        speaker_embeddings=speakers,
    )
if device == "cuda":
    print(
        f"eval loss {out.loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
