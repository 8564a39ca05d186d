"""HF BartForConditionalGeneration from a bart-large BartConfig (1024 wide, 12+12 layers, 16 heads, 50265
vocab, tied embeddings; 406M), fp32 weights under bf16 autocast, summarization-style batch 24 x 1024 source
tokens (padded, attention_mask) and 192-token labels with -100 padding (decoder inputs shifted from the
labels by the model), label-smoothed CE computed outside the model from the logits, clip_grad_norm_,
AdamW decay groups + transformers' linear warmup schedule, 3 steps; then `no_grad` eval loss at batch 48."""

import os

import torch
import torch.nn.functional as F
from transformers import BartConfig, BartForConditionalGeneration, get_linear_schedule_with_warmup

D, FF, LAYERS, HEADS, VOCAB, B, SRC, TGT = (
    (32, 64, 1, 2, 300, 2, 24, 8) if os.environ.get("SMOKE") else (1024, 4096, 12, 16, 50265, 24, 1024, 192)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(601)

config = BartConfig(
    vocab_size=VOCAB,
    d_model=D,
    encoder_ffn_dim=FF,
    decoder_ffn_dim=FF,
    encoder_layers=LAYERS,
    decoder_layers=LAYERS,
    encoder_attention_heads=HEADS,
    decoder_attention_heads=HEADS,
    max_position_embeddings=max(SRC, TGT),
    dropout=0.1,
    attention_dropout=0.0,
    use_cache=False,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
    forced_eos_token_id=2,
)
model = BartForConditionalGeneration(config).to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "layer_norm" not in n]
no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "layer_norm" in n]
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=3e-5
)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=10, num_training_steps=1000)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def batch(b):
    src = torch.randint(3, VOCAB, (b, SRC), device=device)
    src_len = torch.randint(SRC // 2, SRC + 1, (b,), device=device)
    attention_mask = (torch.arange(SRC, device=device)[None, :] < src_len[:, None]).long()
    src = src.masked_fill(attention_mask == 0, config.pad_token_id)
    labels = torch.randint(3, VOCAB, (b, TGT), device=device)
    tgt_len = torch.randint(TGT // 2, TGT + 1, (b,), device=device)
    labels = labels.masked_fill(torch.arange(TGT, device=device)[None, :] >= tgt_len[:, None], -100)
    return src, attention_mask, labels


model.train()
for step in range(3):
    src, attention_mask, labels = batch(B)
    with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
        logits = model(input_ids=src, attention_mask=attention_mask, labels=labels).logits
    loss = F.cross_entropy(
        logits.float().view(-1, VOCAB), labels.view(-1), ignore_index=-100, label_smoothing=0.1
    )
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
    src, attention_mask, labels = batch(2 * B)
    out = model(input_ids=src, attention_mask=attention_mask, labels=labels)
    print(f"eval loss {out.loss.item():.3f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
