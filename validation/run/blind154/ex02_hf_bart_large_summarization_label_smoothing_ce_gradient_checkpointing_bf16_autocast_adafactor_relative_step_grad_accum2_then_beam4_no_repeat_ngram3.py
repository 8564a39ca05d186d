"""BART-large summarization training from BartConfig (1,024 wide, 12 + 12 layers, 16 heads,
feed-forward 4,096, vocabulary 50,265, fp32 weights) as a fine-tuning loop written by hand: articles
of 1,024 tokens (padded, attention_mask), 142-token summaries shifted right by shift_tokens_right
into decoder_input_ids, the loss nn.CrossEntropyLoss(label_smoothing=0.1, ignore_index=-100) over
the LM logits taken in fp32; gradient checkpointing on (use_cache off), bf16 autocast, Hugging
Face's Adafactor (scale_parameter, relative_step, warmup_init), micro-batches of 8 with 2
accumulated per step, 3 steps; then summaries of 8 articles by beam search (4 beams,
no_repeat_ngram_size 3, 60 new tokens, the length fixed by min_new_tokens) under inference_mode and
bf16 autocast with the cache on; 4 phases."""

import os

import torch
import torch.nn as nn
from transformers import BartConfig, BartForConditionalGeneration
from transformers.models.bart.modeling_bart import shift_tokens_right
from transformers.optimization import Adafactor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15402)
if SMALL:
    config = BartConfig(
        vocab_size=300,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
    )
    MB, ACC, SRC, TGT, STEPS, GEN_B, NEW = 2, 2, 48, 12, 2, 2, 6
else:
    config = BartConfig(
        vocab_size=50265,
        d_model=1024,
        encoder_layers=12,
        decoder_layers=12,
        encoder_attention_heads=16,
        decoder_attention_heads=16,
        encoder_ffn_dim=4096,
        decoder_ffn_dim=4096,
        max_position_embeddings=1024,
    )
    MB, ACC, SRC, TGT, STEPS, GEN_B, NEW = 8, 2, 1024, 142, 3, 8, 60
PAD, BOS, EOS = config.pad_token_id, config.bos_token_id, config.eos_token_id
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BartForConditionalGeneration(config).to(device)
model.config.use_cache = False
model.gradient_checkpointing_enable()
optimizer = Adafactor(model.parameters(), lr=None, scale_parameter=True, relative_step=True, warmup_init=True)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1, ignore_index=-100)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def articles(n):
    ids = torch.randint(4, config.vocab_size, (n, SRC), device=device)
    ids[:, 0] = BOS
    mask = torch.ones_like(ids)
    for i in range(n):
        end = SRC - (SRC // 10) * (i % 4)
        ids[i, end - 1] = EOS
        ids[i, end:] = PAD
        mask[i, end:] = 0
    return ids, mask


def summaries(n):
    labels = torch.randint(4, config.vocab_size, (n, TGT), device=device)
    for i in range(n):
        end = TGT - (TGT // 7) * (i % 3)
        labels[i, end - 1] = EOS
        labels[i, end:] = -100
    return labels


model.train()
for step in range(STEPS):
    for micro in range(ACC):
        ids, mask = articles(MB)
        labels = summaries(MB)
        dec_in = shift_tokens_right(labels, PAD, config.decoder_start_token_id)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec_in).logits
        loss = criterion(logits.float().view(-1, config.vocab_size), labels.view(-1)) / ACC
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item() * ACC:.4f}")
    if device == "cuda" and step == 0:
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del ids, mask, labels, dec_in, logits, loss
if device == "cuda":
    print(
        f"train allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model.eval()
model.config.use_cache = True
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    ids, mask = articles(GEN_B)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        num_beams=4,
        no_repeat_ngram_size=3,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        length_penalty=2.0,
        early_stopping=True,
        use_cache=True,
    )
print(f"summaries {tuple(out.shape)}")
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
