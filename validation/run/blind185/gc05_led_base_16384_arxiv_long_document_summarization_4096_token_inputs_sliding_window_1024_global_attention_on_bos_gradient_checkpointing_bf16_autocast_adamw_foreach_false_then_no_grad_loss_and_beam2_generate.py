"""Longformer-Encoder-Decoder (Beltagy et al. 2020) long-document summarization in the arXiv setting, an
LEDForConditionalGeneration built from an LEDConfig with no downloads, the sizes of
allenai/led-base-16384: d_model 768, 6 encoder and 6 decoder layers, 12 heads, FFN 3,072, vocabulary
50,265, encoder positions 16,384, decoder positions 1,024, a sliding attention window of 1,024 in every
encoder layer, dropout 0.1. Papers of 4,096 tokens (a multiple of the window, so no padding to it) with
global attention on the first token (global_attention_mask), abstracts of 256 tokens as `labels` (-100
after each abstract's end, shifted right by the model). Gradient checkpointing
(model.gradient_checkpointing_enable()), bf16 autocast over fp32 weights, torch.optim.AdamW(foreach=False)
(lr 3e-5) with clipping at 1.0 at batch 8: the first step its own phase, then 2 steps; then model.eval()
under no_grad with bf16 autocast: the loss at batch 8, and a 2-beam `generate()` (64 new tokens,
min_new_tokens 64, length_penalty 2.0, the global attention mask passed along) at batch 4; 4 phases."""

import os

import torch
from transformers import LEDConfig, LEDForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18505)
if SMALL:
    D, FF, L, H, VOCAB, WINDOW = 64, 128, 2, 4, 1000, 32
    B, STEPS, EVAL_B, GEN_B, SRC, TGT, GEN = 2, 2, 2, 2, 128, 16, 6
else:
    D, FF, L, H, VOCAB, WINDOW = 768, 3072, 6, 12, 50265, 1024
    B, STEPS, EVAL_B, GEN_B, SRC, TGT, GEN = 8, 3, 8, 4, 4096, 256, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
BOS, PAD, EOS = 0, 1, 2

config = LEDConfig(
    vocab_size=VOCAB,
    d_model=D,
    encoder_layers=L,
    decoder_layers=L,
    encoder_attention_heads=H,
    decoder_attention_heads=H,
    encoder_ffn_dim=FF,
    decoder_ffn_dim=FF,
    max_encoder_position_embeddings=16384,
    max_decoder_position_embeddings=1024,
    attention_window=[WINDOW] * L,
    dropout=0.1,
    attention_dropout=0.0,
    activation_function="gelu",
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
    decoder_start_token_id=EOS,
)
model = LEDForConditionalGeneration(config).to(device)
model.gradient_checkpointing_enable()
print(f"params {sum(p.numel() for p in model.parameters())}")


def arxiv_batch(bs):
    input_ids = torch.randint(4, VOCAB, (bs, SRC), device=device)
    input_ids[:, 0] = BOS
    input_ids[:, -1] = EOS
    attention_mask = torch.ones_like(input_ids)
    global_attention_mask = torch.zeros_like(input_ids)
    global_attention_mask[:, 0] = 1
    labels = torch.randint(4, VOCAB, (bs, TGT), device=device)
    lengths = torch.randint(TGT // 2, TGT, (bs, 1), device=device)
    pos = torch.arange(TGT, device=device)[None, :]
    labels = torch.where(pos == lengths, torch.full_like(labels, EOS), labels)
    labels = torch.where(pos > lengths, torch.full_like(labels, -100), labels)
    return input_ids, attention_mask, global_attention_mask, labels


optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, foreach=False)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    input_ids, attention_mask, global_attention_mask, labels = arxiv_batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            global_attention_mask=global_attention_mask,
            labels=labels,
        ).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    input_ids, attention_mask, global_attention_mask, labels = arxiv_batch(EVAL_B)
    val_loss = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        global_attention_mask=global_attention_mask,
        labels=labels,
    ).loss
print(f"val loss {val_loss.item():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    abstracts = model.generate(
        input_ids=input_ids[:GEN_B],
        attention_mask=attention_mask[:GEN_B],
        global_attention_mask=global_attention_mask[:GEN_B],
        num_beams=2,
        length_penalty=2.0,
        max_new_tokens=GEN,
        min_new_tokens=GEN,
    )
print(f"abstracts {tuple(abstracts.shape)}")
if device == "cuda":
    print(
        f"generate allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
