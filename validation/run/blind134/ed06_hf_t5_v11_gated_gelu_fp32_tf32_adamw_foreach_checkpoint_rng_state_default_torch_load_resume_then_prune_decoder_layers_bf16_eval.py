"""Checkpoint and resume of a Hugging Face T5 v1.1-style seq2seq model (T5Config: 768 wide, gated-GELU
feed-forward of 2,048, 8 encoder and 8 decoder layers, 12 heads, 32,128 vocabulary, untied head;
fp32 with TF32 matmuls): 2 steps of AdamW (foreach) at batch 16 with 512 source and 128 target
tokens, then a checkpoint dict (model and optimizer state_dict(), step, the CUDA RNG state) saved by
torch.save into an io.BytesIO, all deleted and the cache emptied; the model rebuilt on the GPU, the
checkpoint read back by torch.load with the default map_location (its tensors come back to the GPU
they were saved from), loaded into the model and a fresh AdamW, the RNG state restored, the
checkpoint dropped, 1 more step; then surgery for a faster student: every other decoder block
dropped from the ModuleList, the optimizer dropped, the model turned to bf16 by
`.to(torch.bfloat16)` and its loss measured under inference_mode at batch 32; 6 phases."""

import io
import os

import torch
import torch.nn as nn
from transformers import T5Config, T5ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13406)
torch.backends.cuda.matmul.allow_tf32 = True
B, S, TT = (2, 32, 16) if SMALL else (16, 512, 128)
cfg = T5Config(
    vocab_size=32128 if not SMALL else 512,
    d_model=768 if not SMALL else 64,
    d_kv=64 if not SMALL else 16,
    d_ff=2048 if not SMALL else 128,
    num_layers=8 if not SMALL else 2,
    num_decoder_layers=8 if not SMALL else 2,
    num_heads=12 if not SMALL else 4,
    feed_forward_proj="gated-gelu",
    tie_word_embeddings=False,
    dropout_rate=0.0,
    decoder_start_token_id=0,
    pad_token_id=0,
)
device = "cuda" if torch.cuda.is_available() else "cpu"


def build():
    m = T5ForConditionalGeneration(cfg).to(device)
    m.train()
    o = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
    return m, o


model, opt = build()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(model, opt):
    src = torch.randint(1, cfg.vocab_size, (B, S), device=device)
    tgt = torch.randint(1, cfg.vocab_size, (B, TT), device=device)
    loss = model(input_ids=src, attention_mask=torch.ones_like(src), labels=tgt).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


for _ in range(2):
    loss = train_step(model, opt)
if device == "cuda":
    print(
        f"trained loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

buf = io.BytesIO()
ckpt = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 2}
if device == "cuda":
    ckpt["cuda_rng"] = torch.cuda.get_rng_state()
torch.save(ckpt, buf)
del ckpt, model, opt, loss
if device == "cuda":
    torch.cuda.empty_cache()
    print(
        f"saved {buf.tell()} bytes allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model, opt = build()
buf.seek(0)
ckpt = torch.load(buf)
model.load_state_dict(ckpt["model"])
opt.load_state_dict(ckpt["optim"])
if "cuda_rng" in ckpt:
    torch.cuda.set_rng_state(ckpt["cuda_rng"])
del ckpt
if device == "cuda":
    print(
        f"restored allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

loss = train_step(model, opt)
if device == "cuda":
    print(
        f"resumed loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del opt, loss
model.decoder.block = nn.ModuleList(model.decoder.block[i] for i in range(0, cfg.num_decoder_layers, 2))
model.config.num_decoder_layers = len(model.decoder.block)
model = model.to(torch.bfloat16).eval()
with torch.inference_mode():
    src = torch.randint(1, cfg.vocab_size, (2 * B, S), device=device)
    tgt = torch.randint(1, cfg.vocab_size, (2 * B, TT), device=device)
    val = model(input_ids=src, labels=tgt, use_cache=False).loss
if device == "cuda":
    print(
        f"pruned {len(model.decoder.block)} blocks bf16 loss {val.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
