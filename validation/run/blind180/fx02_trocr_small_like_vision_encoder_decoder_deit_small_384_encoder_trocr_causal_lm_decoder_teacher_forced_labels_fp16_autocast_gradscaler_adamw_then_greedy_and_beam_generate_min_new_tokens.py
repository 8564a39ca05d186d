"""A TrOCR-like text recognizer after Li et al. 2021 ("TrOCR: Transformer-based Optical Character
Recognition with Pre-trained Models") and transformers' VisionEncoderDecoderModel, built from configs
with no downloads, the sizes of microsoft/trocr-small-printed: a DeiT-small-shaped ViTModel encoder (384
x 384 images, patch 16: 576 patches + [CLS], hidden 384, 12 layers, 6 heads, no pooler) and a
TrOCRForCausalLM decoder (d_model 256, 6 layers, 8 heads, FFN 1,024, vocabulary 64,044, learned
positions, layernorm_embedding) joined by the encoder-decoder cross attention (the encoder's 384
projected by the decoder's own k/v projections). Teacher-forced training with `labels` (the model shifts
them right with decoder_start_token_id and masks padding as -100): fp16 autocast with
torch.amp.GradScaler (started at 2 ** 12) and AdamW (lr 5e-5, weight decay 0.01), batch 48 x 32 label
tokens, the first step its own phase, then 3 steps; then evaluation under no_grad: the teacher-forced
loss at batch 64, `generate()` greedy with `max_new_tokens=32, min_new_tokens=32` (EOS suppressed, so
every sequence runs to the same length) at batch 64, and a 4-beam search of 24 new tokens at batch 16; 5
phases."""

import os

import torch
from transformers import (
    TrOCRConfig,
    TrOCRForCausalLM,
    VisionEncoderDecoderModel,
    ViTConfig,
    ViTModel,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18002)
if SMALL:
    IMG, ENC_H, ENC_L, ENC_HEADS, DEC_D, DEC_L, VOCAB = 64, 32, 2, 2, 32, 2, 500
    B, STEPS, EVAL_B, BEAM_B, LABEL_LEN, GEN_LEN, BEAM_LEN = 2, 2, 2, 2, 8, 4, 4
else:
    IMG, ENC_H, ENC_L, ENC_HEADS, DEC_D, DEC_L, VOCAB = 384, 384, 12, 6, 256, 6, 64044
    B, STEPS, EVAL_B, BEAM_B, LABEL_LEN, GEN_LEN, BEAM_LEN = 48, 4, 64, 16, 32, 32, 24
device = "cuda" if torch.cuda.is_available() else "cpu"
PAD, BOS, EOS = 1, 0, 2

enc_cfg = ViTConfig(
    image_size=IMG,
    patch_size=16,
    num_channels=3,
    hidden_size=ENC_H,
    num_hidden_layers=ENC_L,
    num_attention_heads=ENC_HEADS,
    intermediate_size=4 * ENC_H,
    qkv_bias=True,
)
dec_cfg = TrOCRConfig(
    vocab_size=VOCAB,
    d_model=DEC_D,
    decoder_layers=DEC_L,
    decoder_attention_heads=8 if not SMALL else 2,
    decoder_ffn_dim=4 * DEC_D,
    activation_function="relu",
    max_position_embeddings=512,
    use_learned_position_embeddings=True,
    layernorm_embedding=True,
    scale_embedding=True,
    cross_attention_hidden_size=ENC_H,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
    decoder_start_token_id=EOS,
    is_decoder=True,
    add_cross_attention=True,
)
model = VisionEncoderDecoderModel(
    encoder=ViTModel(enc_cfg, add_pooling_layer=False), decoder=TrOCRForCausalLM(dec_cfg)
)
model.config.decoder_start_token_id = EOS
model.config.pad_token_id = PAD
model.config.eos_token_id = EOS
model.config.vocab_size = VOCAB
model.generation_config.decoder_start_token_id = EOS
model.generation_config.pad_token_id = PAD
model.generation_config.eos_token_id = EOS
model.to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")


def ocr_batch(bs):
    pixel_values = torch.randn(bs, 3, IMG, IMG, device=device)
    labels = torch.randint(3, VOCAB, (bs, LABEL_LEN), device=device)
    lengths = torch.randint(LABEL_LEN // 2, LABEL_LEN, (bs, 1), device=device)
    pos = torch.arange(LABEL_LEN, device=device)[None, :]
    labels = torch.where(pos == lengths, torch.full_like(labels, EOS), labels)
    labels = torch.where(pos > lengths, torch.full_like(labels, -100), labels)
    return pixel_values, labels


optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**12, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    pixel_values, labels = ocr_batch(B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        outputs = model(pixel_values=pixel_values, labels=labels)
        loss = outputs.loss
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    print(f"step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del pixel_values, labels, outputs, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    pixel_values, labels = ocr_batch(EVAL_B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        val_loss = model(pixel_values=pixel_values, labels=labels).loss
print(f"val loss {val_loss.item():.4f}")
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    generated = model.generate(pixel_values, max_new_tokens=GEN_LEN, min_new_tokens=GEN_LEN, do_sample=False)
print(f"greedy {tuple(generated.shape)}")
del generated
if device == "cuda":
    print(f"greedy peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    beams = model.generate(
        pixel_values[:BEAM_B],
        num_beams=4,
        max_new_tokens=BEAM_LEN,
        min_new_tokens=BEAM_LEN,
        early_stopping=False,
        length_penalty=1.0,
    )
print(f"beam {tuple(beams.shape)}")
if device == "cuda":
    print(
        f"beam allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
