"""HF transformers FSMT (fairseq's WMT19 translation transformer: separate source and target
vocabularies, sinusoidal positions) built from a config at 6+6 layers, 512 wide, 8 heads,
vocabularies 32,000 / 30,000, trained in fp32 with Adam (betas 0.9/0.98) and fairseq's inverse-sqrt
warm-up as a LambdaLR, label-smoothed cross entropy (0.1) over padded targets: each batch 32
sentence pairs, source 64-200 and target 48-160 tokens, lengths drawn on the GPU and padded with the
pad id; 3 steps, then beam search (4 beams, 40 new tokens) for 8 sources under no_grad; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import FSMTConfig, FSMTForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9802)
if SMALL:
    cfg = FSMTConfig(
        src_vocab_size=100,
        tgt_vocab_size=90,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        langs=["en", "de"],
    )
    B, S, T, NEW = 4, 24, 16, 5
else:
    cfg = FSMTConfig(
        src_vocab_size=32000,
        tgt_vocab_size=30000,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        langs=["en", "de"],
    )
    B, S, T, NEW = 32, 200, 160, 40
PAD = cfg.pad_token_id
device = "cuda" if torch.cuda.is_available() else "cpu"


def padded(n, max_len, vocab):
    lengths = torch.randint(max_len * 3 // 10, max_len + 1, (n,), device=device)
    keep = torch.arange(max_len, device=device)[None, :] < lengths[:, None]
    ids = torch.randint(4, vocab, (n, max_len), device=device)
    return torch.where(keep, ids, torch.full_like(ids, PAD)), keep


model = FSMTForConditionalGeneration(cfg).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-9)
WARM = 4000
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: min((s + 1) / WARM, (WARM / (s + 1)) ** 0.5)
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    src, src_mask = padded(B, S, cfg.src_vocab_size)
    tgt, tgt_mask = padded(B, T, cfg.tgt_vocab_size)
    dec_in = torch.cat([torch.full_like(tgt[:, :1], cfg.decoder_start_token_id), tgt[:, :-1]], dim=1)
    logits = model(
        input_ids=src,
        attention_mask=src_mask.long(),
        decoder_input_ids=dec_in,
        decoder_attention_mask=tgt_mask,
        use_cache=False,
    ).logits
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=PAD, label_smoothing=0.1
    )
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del logits, loss
model.eval()
with torch.no_grad():
    out = model.generate(
        input_ids=src[:8],
        attention_mask=src_mask[:8].long(),
        num_beams=4,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        early_stopping=False,
    )
if device == "cuda":
    print(
        f"generate {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
