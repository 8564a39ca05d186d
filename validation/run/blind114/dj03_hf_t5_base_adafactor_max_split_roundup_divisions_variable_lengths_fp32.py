"""HF T5 (t5-base's shape, from T5Config) fine-tuned for summarization with the allocator tuned the way
long-tail sequence lengths tempt users to: PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:64,
roundup_power2_divisions:[256:1,512:2,1024:4,>:8]" set before torch is imported; fp32, transformers'
Adafactor (relative step, no first moment), gradient checkpointing (non-reentrant), batch 24 with
source/target lengths changing every step (512/128, 384/96, 768/160, 448/64 tokens, padding masked
by -100 labels); then greedy generation of 48 tokens for 16 sources of 512 under no_grad; 6 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = (
    "max_split_size_mb:64,roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"
)

import torch
from transformers import T5Config, T5ForConditionalGeneration
from transformers.optimization import Adafactor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11403)
B, BG, NEW = (2, 2, 4) if SMALL else (24, 16, 48)
SHAPES = [(64, 16), (48, 12), (96, 20), (56, 8)] if SMALL else [(512, 128), (384, 96), (768, 160), (448, 64)]
device = "cuda" if torch.cuda.is_available() else "cpu"

cfg = T5Config(
    vocab_size=32128,
    d_model=64 if SMALL else 768,
    d_kv=16 if SMALL else 64,
    d_ff=256 if SMALL else 3072,
    num_layers=2 if SMALL else 12,
    num_heads=4 if SMALL else 12,
    decoder_start_token_id=0,
    pad_token_id=0,
    eos_token_id=1,
)
model = T5ForConditionalGeneration(cfg).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
optimizer = Adafactor(model.parameters(), lr=None, relative_step=True, scale_parameter=True, warmup_init=True)


def batch(n, src, tgt):
    src_len = torch.randint(src // 2, src + 1, (n,), device=device)
    src_len[0] = src
    attn = (torch.arange(src, device=device)[None] < src_len[:, None]).long()
    ids = torch.randint(2, cfg.vocab_size, (n, src), device=device) * attn
    labels = torch.randint(2, cfg.vocab_size, (n, tgt), device=device)
    tgt_len = torch.randint(tgt // 2, tgt + 1, (n,), device=device)
    labels = labels.masked_fill(torch.arange(tgt, device=device)[None] >= tgt_len[:, None], -100)
    return ids, attn, labels


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step, (src, tgt) in enumerate(SHAPES):
    ids, attn, labels = batch(B, src, tgt)
    loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} {src}/{tgt} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, attn, labels, loss
model.eval()
model.config.use_cache = True
with torch.no_grad():
    ids, attn, _ = batch(BG, SHAPES[0][0], 1)
    out = model.generate(
        input_ids=ids, attention_mask=attn, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False
    )
if device == "cuda":
    print(
        f"generate {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
