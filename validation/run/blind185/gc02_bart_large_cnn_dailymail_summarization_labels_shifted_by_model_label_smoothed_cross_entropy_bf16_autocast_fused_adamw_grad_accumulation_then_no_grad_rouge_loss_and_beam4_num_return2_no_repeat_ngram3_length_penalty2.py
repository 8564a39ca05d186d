"""BART-large summarization in the fairseq/transformers CNN-DailyMail recipe (Lewis et al. 2020), a
BartForConditionalGeneration built from a BartConfig with no downloads: d_model 1,024, 12 encoder and 12
decoder layers, 16 heads, FFN 4,096, vocabulary 50,265 with the lm_head tied to the shared embedding,
learned positions (1,026), dropout 0.1. Articles of 1,024 tokens (right-padded to the batch's longest on
the host, with an attention mask) and highlights of up to 142 tokens passed as `labels` padded with -100:
the model shifts them right itself (decoder_start_token_id 2) and the loss is the label-smoothed cross
entropy (epsilon 0.1, -100 ignored) that fairseq's recipe uses, taken by hand on the returned logits in
fp32. bf16 autocast over fp32 weights, torch.optim.AdamW(fused=True) (lr 3e-5, weight decay 0.01) with
grad-norm clipping at 1.0 and 2 micro-batches of 8 per optimizer step: the first step its own phase, then
2 steps; then evaluation under no_grad: the validation loss at batch 16, and `generate()` as the CNN
checkpoint's generation config does it (4 beams, length_penalty 2.0, no_repeat_ngram_size 3,
num_return_sequences 2, 56 new tokens with min_new_tokens 56) at batch 8 in bf16 autocast; 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import BartConfig, BartForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18502)
if SMALL:
    D, FF, L, H, VOCAB = 64, 128, 2, 4, 1000
    MICRO, ACCUM, STEPS, EVAL_B, GEN_B, SRC, TGT, GEN = 2, 2, 2, 2, 2, 64, 16, 6
else:
    D, FF, L, H, VOCAB = 1024, 4096, 12, 16, 50265
    MICRO, ACCUM, STEPS, EVAL_B, GEN_B, SRC, TGT, GEN = 8, 2, 3, 16, 8, 1024, 142, 56
device = "cuda" if torch.cuda.is_available() else "cpu"
BOS, PAD, EOS = 0, 1, 2

config = BartConfig(
    vocab_size=VOCAB,
    d_model=D,
    encoder_layers=L,
    decoder_layers=L,
    encoder_attention_heads=H,
    decoder_attention_heads=H,
    encoder_ffn_dim=FF,
    decoder_ffn_dim=FF,
    max_position_embeddings=1024,
    dropout=0.1,
    attention_dropout=0.0,
    activation_function="gelu",
    scale_embedding=False,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
    decoder_start_token_id=EOS,
    forced_bos_token_id=BOS,
    forced_eos_token_id=EOS,
)
model = BartForConditionalGeneration(config).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")


def collate(bs):
    """Articles and highlights of random lengths, padded to the longest like DataCollatorForSeq2Seq."""
    src_len = torch.randint(SRC * 3 // 4, SRC + 1, (bs,))
    tgt_len = torch.randint(TGT // 2, TGT + 1, (bs,))
    s_max, t_max = int(src_len.max()), int(tgt_len.max())
    input_ids = torch.full((bs, s_max), PAD, dtype=torch.long)
    labels = torch.full((bs, t_max), -100, dtype=torch.long)
    for i in range(bs):
        n, m = int(src_len[i]), int(tgt_len[i])
        input_ids[i, :n] = torch.randint(4, VOCAB, (n,))
        input_ids[i, 0], input_ids[i, n - 1] = BOS, EOS
        labels[i, :m] = torch.randint(4, VOCAB, (m,))
        labels[i, 0], labels[i, m - 1] = BOS, EOS
    attention_mask = (input_ids != PAD).long()
    return input_ids.to(device), attention_mask.to(device), labels.to(device)


def label_smoothed_nll(logits, labels, eps=0.1):
    lprobs = F.log_softmax(logits.float(), dim=-1)
    mask = labels != -100
    target = labels.clamp(min=0)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.mean(dim=-1)
    loss = (1.0 - eps) * nll + eps * smooth
    return (loss * mask).sum() / mask.sum()


optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    for _micro in range(ACCUM):
        input_ids, attention_mask, labels = collate(MICRO)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits
        loss = label_smoothed_nll(logits, labels) / ACCUM
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item() * ACCUM:.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del logits, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    input_ids, attention_mask, labels = collate(EVAL_B)
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    val_loss = label_smoothed_nll(out.logits, labels)
    print(f"val loss {val_loss.item():.4f} model loss {out.loss.item():.4f}")
    del out
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    summaries = model.generate(
        input_ids=input_ids[:GEN_B],
        attention_mask=attention_mask[:GEN_B],
        num_beams=4,
        num_return_sequences=2,
        length_penalty=2.0,
        no_repeat_ngram_size=3,
        max_new_tokens=GEN,
        min_new_tokens=GEN,
        early_stopping=True,
    )
print(f"summaries {tuple(summaries.shape)}")
if device == "cuda":
    print(
        f"generate allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
