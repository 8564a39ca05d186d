"""HF transformers PLBart (BART for code, with language-id tokens) built from a config at 6+6 layers,
768 wide, 12 heads, vocabulary 50,005, fp32 weights trained under fp16 autocast with GradScaler for
code summarisation: batches of 8 code sequences of up to 512 tokens and summaries of up to 64,
lengths drawn on the host, source, decoder inputs (BOS then the shifted summary) and labels (-100
past the summary) padded on the host and copied to the GPU with both attention masks; cross entropy
with label smoothing 0.1 over the logits, AdamW, gradient clipping after unscale_, a linear-decay
LambdaLR, 4 steps; then a 4-beam generate of 48 new tokens for 4 sources under fp16 autocast;
6 phases."""

import os
import random

import torch
import torch.nn.functional as F
from transformers import PLBartConfig, PLBartForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10401)
rng = random.Random(10401)
if SMALL:
    cfg = PLBartConfig(
        vocab_size=128,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
    )
    B, S, T, NEW = 2, 24, 8, 4
else:
    cfg = PLBartConfig(vocab_size=50005)
    B, S, T, NEW = 8, 512, 64, 48
PAD, BOS, EOS = cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id
device = "cuda" if torch.cuda.is_available() else "cpu"


def batch():
    src, smask, dec, dmask, labels = [], [], [], [], []
    for _ in range(B):
        n, m = rng.randint(S // 4, S), rng.randint(T // 4, T - 1)
        src.append([rng.randint(4, cfg.vocab_size - 1) for _ in range(n - 1)] + [EOS] + [PAD] * (S - n))
        smask.append([1] * n + [0] * (S - n))
        summ = [rng.randint(4, cfg.vocab_size - 1) for _ in range(m)] + [EOS]
        dec.append([BOS] + summ[:-1] + [PAD] * (T - m - 1))
        dmask.append([1] * (m + 1) + [0] * (T - m - 1))
        labels.append(summ + [-100] * (T - m - 1))
    return [torch.tensor(t).to(device) for t in (src, smask, dec, dmask, labels)]


model = PLBartForConditionalGeneration(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1 - s / 100))
scaler = torch.amp.GradScaler(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(4):
    src, smask, dec, dmask, labels = batch()
    with torch.autocast(device, dtype=torch.float16):
        logits = model(
            input_ids=src, attention_mask=smask, decoder_input_ids=dec, decoder_attention_mask=dmask
        ).logits
        loss = F.cross_entropy(logits.float().view(-1, cfg.vocab_size), labels.view(-1), label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del logits, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16):
    out = model.generate(
        input_ids=src[:4],
        attention_mask=smask[:4],
        num_beams=4,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        decoder_start_token_id=BOS,
    )
if device == "cuda":
    print(
        f"generate {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
