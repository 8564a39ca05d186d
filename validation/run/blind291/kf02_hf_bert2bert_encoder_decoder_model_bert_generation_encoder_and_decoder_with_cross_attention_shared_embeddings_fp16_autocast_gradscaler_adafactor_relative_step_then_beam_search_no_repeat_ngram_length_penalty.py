"""A "bert2bert" summarizer: HF EncoderDecoderModel built from a BertGenerationEncoder and a
BertGenerationDecoder (model_type "bert-generation"; the decoder with is_decoder and
add_cross_attention, sharing the encoder's word embeddings), 768 wide, 6 + 6 layers, trained on
right-padded (article 512, summary 96) batches of 12 with decoder_input_ids shifted by the model from
labels (pad as -100), fp16 autocast with torch.amp.GradScaler (init_scale 1024) and transformers'
Adafactor (relative_step, scale_parameter, warmup_init; factored second moments), 3 steps; then beam
search generate() (num_beams 4, no_repeat_ngram_size 3, length_penalty 2.0, early_stopping,
min_new_tokens == max_new_tokens) in fp16 under inference_mode.

Phases: 0 model and optimizer built; 1 first step; 2 two more steps; 3 model halved, optimizer and
scaler freed; 4 beam search."""

import os

import torch
from transformers import (
    BertGenerationConfig,
    BertGenerationDecoder,
    BertGenerationEncoder,
    EncoderDecoderModel,
)
from transformers.optimization import Adafactor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2912)
if SMALL:
    kw = dict(
        vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    B, SRC, TGT, BEAM_B, NEW = 2, 24, 8, 2, 10
else:
    kw = dict(
        vocab_size=30522, hidden_size=768, num_hidden_layers=6, num_attention_heads=12, intermediate_size=3072
    )
    B, SRC, TGT, BEAM_B, NEW = 12, 512, 96, 6, 64
PAD, BOS, EOS = 0, 2, 1
enc_cfg = BertGenerationConfig(**kw, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
dec_cfg = BertGenerationConfig(
    **kw, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, is_decoder=True, add_cross_attention=True
)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


encoder = BertGenerationEncoder(enc_cfg)
decoder = BertGenerationDecoder(dec_cfg)
decoder.bert.embeddings.word_embeddings = encoder.embeddings.word_embeddings
model = EncoderDecoderModel(encoder=encoder, decoder=decoder)
model.config.decoder_start_token_id = BOS
model.config.pad_token_id = PAD
model.config.eos_token_id = EOS
model.to(device)
optimizer = Adafactor(model.parameters(), lr=None, relative_step=True, scale_parameter=True, warmup_init=True)
scaler = torch.amp.GradScaler(device, init_scale=2.0**10, enabled=device == "cuda")
report("built")

src_len = torch.linspace(SRC // 2, SRC, B).long()
tgt_len = torch.linspace(TGT // 2, TGT, B).long()
model.train()
for step in range(3):
    src = torch.randint(5, kw["vocab_size"], (B, SRC))
    src_mask = (torch.arange(SRC)[None, :] < src_len[:, None]).long()
    src = src * src_mask
    tgt = torch.randint(5, kw["vocab_size"], (B, TGT))
    tgt_pos = torch.arange(TGT)[None, :]
    tgt[tgt_pos == (tgt_len[:, None] - 1)] = EOS
    labels = tgt.masked_fill(tgt_pos >= tgt_len[:, None], -100)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        out = model(input_ids=src.to(device), attention_mask=src_mask.to(device), labels=labels.to(device))
    scaler.scale(out.loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f} scale {scaler.get_scale()}")
    del out, src, src_mask, labels
    if step == 0:
        report("step0")
report("steps1-2")

del optimizer, scaler
model.half().eval()
report("halved")

src = torch.randint(5, kw["vocab_size"], (BEAM_B, SRC))
src_mask = (torch.arange(SRC)[None, :] < torch.linspace(SRC * 3 // 4, SRC, BEAM_B).long()[:, None]).long()
src = src * src_mask
with torch.inference_mode():
    summary = model.generate(
        input_ids=src.to(device),
        attention_mask=src_mask.to(device),
        num_beams=4,
        no_repeat_ngram_size=3,
        length_penalty=2.0,
        early_stopping=True,
        min_new_tokens=NEW,
        max_new_tokens=NEW,
    )
print("summary", tuple(summary.shape))
report("beam")
