"""Speech translation with transformers' SpeechEncoderDecoderModel built from two configs (no download).

Encoder: Wav2Vec2 with the stable layer norm layout of wav2vec2-large-lv60 (layer-norm conv feature
encoder, pre-norm transformer), 12 layers of 768 here, SpecAugment on (mask_time_prob 0.05, numpy seeded),
and the 3-layer convolutional adapter (stride 2 each, GLU) projecting to 1024, so the encoder's 16 kHz
audio reaches the decoder at one vector per 160 ms. Decoder: MBartForCausalLM (6 layers of 1024, 16 heads,
FFN 4096, vocabulary 16,000) with cross-attention, as in the XLS-R + mBART-50 recipe.

Data: 12 utterances of 6 to 16 s (host-drawn lengths, zero padded, attention_mask passed through the
encoder and reduced for the cross-attention), targets of 20 to 96 tokens padded with -100.

Phases: the first step (bf16 autocast, feature encoder frozen, foreach AdamW lr 3e-4, clipping 1.0);
3 more steps; beam search with 4 beams and exactly 40 new tokens (min_new_tokens = max_new_tokens, so EOS
cannot end a beam) under bf16 autocast; then "LNA" fine-tuning in fp32: only the encoder's and decoder's
layer norms, the decoder's encoder-attention and the adapter trainable, fused AdamW, 3 steps. 4 phases."""

import os

import numpy as np
import torch
from transformers import MBartConfig, SpeechEncoderDecoderConfig, SpeechEncoderDecoderModel, Wav2Vec2Config

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2053)
np.random.seed(2053)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

if SMALL:
    enc_cfg = Wav2Vec2Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        conv_dim=(32,) * 7,
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        feat_extract_norm="layer",
        do_stable_layer_norm=True,
        add_adapter=True,
        num_adapter_layers=3,
        output_hidden_size=96,
    )
    dec_cfg = MBartConfig(
        d_model=96, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=192, vocab_size=300
    )
    BATCH, MIN_S, MAX_S, MIN_T, MAX_T, NEW = 3, 16000, 32000, 4, 12, 6
else:
    enc_cfg = Wav2Vec2Config(
        feat_extract_norm="layer",
        do_stable_layer_norm=True,
        mask_time_prob=0.05,
        layerdrop=0.0,
        add_adapter=True,
        num_adapter_layers=3,
        adapter_stride=2,
        output_hidden_size=1024,
    )
    dec_cfg = MBartConfig(
        d_model=1024,
        decoder_layers=6,
        decoder_attention_heads=16,
        decoder_ffn_dim=4096,
        vocab_size=16000,
        max_position_embeddings=1024,
        scale_embedding=True,
    )
    BATCH, MIN_S, MAX_S, MIN_T, MAX_T, NEW = 12, 96000, 256000, 20, 96, 40
dec_cfg.is_decoder = True
dec_cfg.add_cross_attention = True
cfg = SpeechEncoderDecoderConfig.from_encoder_decoder_configs(enc_cfg, dec_cfg)
cfg.decoder_start_token_id = 2
cfg.pad_token_id = 1
cfg.eos_token_id = 2


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = SpeechEncoderDecoderModel(config=cfg).to(device)
model.generation_config.decoder_start_token_id = 2
model.generation_config.pad_token_id = 1
model.generation_config.eos_token_id = 2
model.freeze_feature_encoder()
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
gen = torch.Generator().manual_seed(11)


def make_batch():
    lengths = torch.randint(MIN_S, MAX_S + 1, (BATCH,), generator=gen)
    lengths[0] = MAX_S
    wave = torch.zeros(BATCH, MAX_S)
    mask = torch.zeros(BATCH, MAX_S, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        w = torch.randn(n, generator=gen)
        wave[i, :n] = (w - w.mean()) / (w.std() + 1e-7)
        mask[i, :n] = 1
    t_len = torch.randint(MIN_T, MAX_T + 1, (BATCH,), generator=gen)
    labels = torch.full((BATCH, int(t_len.max())), -100, dtype=torch.long)
    for i, n in enumerate(t_len.tolist()):
        labels[i, :n] = torch.randint(3, dec_cfg.vocab_size, (n,), generator=gen)
        labels[i, n - 1] = 2
    return wave.to(device), mask.to(device), labels.to(device)


def train_step(opt, autocast):
    wave, mask, labels = make_batch()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp and autocast):
        loss = model(inputs=wave, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-4, foreach=True)
model.train()
print(f"step 0 loss {train_step(opt, True):.4f}")
report("first step")
for _ in range(3):
    loss = train_step(opt, True)
print(f"step 3 loss {loss:.4f}")
report("train bf16")

model.eval()
with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    wave, mask, _ = make_batch()
    out = model.generate(
        wave, attention_mask=mask, num_beams=4, max_new_tokens=NEW, min_new_tokens=NEW, early_stopping=True
    )
print(f"beam search output {tuple(out.shape)}")
report("beam search")

del opt
for name, p in model.named_parameters():
    p.requires_grad_(
        "layer_norm" in name or "encoder_attn" in name or "adapter" in name or "layernorm" in name
    )
model.encoder.feature_extractor._freeze_parameters()
trainable = [p for p in model.parameters() if p.requires_grad]
print(f"LNA trainable {sum(p.numel() for p in trainable) / 1e6:.1f}M")
opt = torch.optim.AdamW(trainable, lr=1e-4, fused=amp)
model.train()
for step in range(3):
    print(f"lna step {step} loss {train_step(opt, False):.4f}")
report("lna fp32")
