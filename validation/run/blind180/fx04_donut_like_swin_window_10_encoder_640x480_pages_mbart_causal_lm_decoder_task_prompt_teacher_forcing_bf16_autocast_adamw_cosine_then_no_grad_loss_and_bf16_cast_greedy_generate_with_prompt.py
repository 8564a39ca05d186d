"""A Donut-like OCR-free document parser after Kim et al. 2022 ("OCR-free Document Understanding
Transformer", clovaai/donut) and transformers' VisionEncoderDecoderModel, from configs with no
downloads: a DonutSwinModel encoder at donut-base's widths (embed 128, depths 2-2-14-2, heads 4-8-16-32,
window 10, patch 4) over 640 x 480 pages (160 x 120 patches, down to 20 x 15, padded to the 10 x 10
windows in the last stage; hidden 1,024) and an MBartForCausalLM decoder of 4 layers at d_model 1,024,
16 heads, FFN 4,096 and Donut's 57,525-token vocabulary with cross attention to the encoder. Training
with a task prompt (the first label token a task token, the model shifting the labels right from the
decoder start token) and 128-token parse sequences, padding -100: bf16 autocast, AdamW (lr 3e-5) with a
cosine schedule (get_cosine_schedule_with_warmup), gradient clipping, batch 12, the first step its own
phase, then 3 steps; a validation loss under no_grad at batch 16; then the model cast to bfloat16
(Donut's inference `half()`) and `generate()` greedy from the 2-token prompt for 64 new tokens
(min_new_tokens=64, so no sequence ends early) at batch 16 under no_grad; 4 phases."""

import os

import torch
from transformers import (
    DonutSwinConfig,
    DonutSwinModel,
    MBartConfig,
    MBartForCausalLM,
    VisionEncoderDecoderModel,
    get_cosine_schedule_with_warmup,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18004)
if SMALL:
    IMG_H, IMG_W, EMBED, DEPTHS, HEADS, WINDOW = 64, 48, 16, [1, 1, 2, 1], [1, 2, 2, 4], 2
    DEC_D, DEC_L, DEC_HEADS, VOCAB, B, STEPS, EVAL_B, SEQ, GEN = 128, 1, 2, 300, 2, 2, 2, 8, 4
else:
    IMG_H, IMG_W, EMBED, DEPTHS, HEADS, WINDOW = 640, 480, 128, [2, 2, 14, 2], [4, 8, 16, 32], 10
    DEC_D, DEC_L, DEC_HEADS, VOCAB, B, STEPS, EVAL_B, SEQ, GEN = 1024, 4, 16, 57525, 12, 4, 16, 128, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
PAD, BOS, EOS, TASK = 1, 0, 2, 57522 if not SMALL else 297

enc_cfg = DonutSwinConfig(
    image_size=[IMG_H, IMG_W],
    patch_size=4,
    embed_dim=EMBED,
    depths=DEPTHS,
    num_heads=HEADS,
    window_size=WINDOW,
    drop_path_rate=0.1,
)
dec_cfg = MBartConfig(
    vocab_size=VOCAB,
    d_model=DEC_D,
    decoder_layers=DEC_L,
    decoder_attention_heads=DEC_HEADS,
    decoder_ffn_dim=4 * DEC_D,
    max_position_embeddings=768,
    scale_embedding=True,
    add_final_layer_norm=True,
    is_decoder=True,
    add_cross_attention=True,
    is_encoder_decoder=False,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
    dropout=0.1,
)
model = VisionEncoderDecoderModel(encoder=DonutSwinModel(enc_cfg), decoder=MBartForCausalLM(dec_cfg))
model.config.decoder_start_token_id = BOS
model.config.pad_token_id = PAD
model.config.eos_token_id = EOS
model.config.vocab_size = VOCAB
model.generation_config.decoder_start_token_id = BOS
model.generation_config.pad_token_id = PAD
model.generation_config.eos_token_id = EOS
model.to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")


def parse_batch(bs):
    pixel_values = torch.randn(bs, 3, IMG_H, IMG_W, device=device)
    labels = torch.randint(3, VOCAB - 3, (bs, SEQ), device=device)
    labels[:, 0] = TASK
    lengths = torch.randint(SEQ // 2, SEQ, (bs, 1), device=device)
    pos = torch.arange(SEQ, device=device)[None, :]
    labels = torch.where(pos == lengths, torch.full_like(labels, EOS), labels)
    labels = torch.where(pos > lengths, torch.full_like(labels, -100), labels)
    return pixel_values, labels


optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)
scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=1, num_training_steps=STEPS)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    pixel_values, labels = parse_batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(pixel_values=pixel_values, labels=labels).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    print(f"step {step} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del pixel_values, labels, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    pixel_values, labels = parse_batch(EVAL_B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        val_loss = model(pixel_values=pixel_values, labels=labels).loss
print(f"val loss {val_loss.item():.4f}")
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del optimizer, scheduler
model.to(torch.bfloat16)
prompt = torch.tensor([[BOS, TASK]], device=device).repeat(EVAL_B, 1)
with torch.no_grad():
    sequences = model.generate(
        pixel_values.to(torch.bfloat16),
        decoder_input_ids=prompt,
        max_new_tokens=GEN,
        min_new_tokens=GEN,
        do_sample=False,
        use_cache=True,
    )
print(f"generated {tuple(sequences.shape)}")
if device == "cuda":
    print(
        f"generate allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
