"""Resuming a pure-bf16 Hugging Face Llama (LlamaConfig: 1,024 wide, 8 layers, 16 heads, 8 key-value
heads, MLP of 2,816, 32,000 vocabulary, untied head) trained with fused AdamW: 2 steps of 8 x 1,024
tokens, then the model's and the optimizer's state_dict() saved together by torch.save into an
io.BytesIO, everything deleted and the cache emptied; the model rebuilt under torch.device("meta"),
the checkpoint read back with torch.load(map_location="cuda") and put in place by
load_state_dict(assign=True), the rotary embedding's non-persistent inv_freq (left on the meta device)
rebuilt on the GPU, a fresh fused AdamW loaded from the checkpoint's optimizer state, the checkpoint
dropped, 2 more steps, then a held-out loss under inference_mode; 5 phases."""

import io
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13401)
B, T = (2, 64) if SMALL else (8, 1024)
cfg = LlamaConfig(
    vocab_size=32000 if not SMALL else 512,
    hidden_size=1024 if not SMALL else 64,
    intermediate_size=2816 if not SMALL else 128,
    num_hidden_layers=8 if not SMALL else 2,
    num_attention_heads=16 if not SMALL else 4,
    num_key_value_heads=8 if not SMALL else 2,
    max_position_embeddings=T,
    torch_dtype=torch.bfloat16,
)
device = "cuda" if torch.cuda.is_available() else "cpu"

model = LlamaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
model.train()
opt = torch.optim.AdamW(
    model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=device == "cuda"
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(step, tag):
    x = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    loss = model(input_ids=x, labels=x).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


for step in range(2):
    loss = train_step(step, "train")
if device == "cuda":
    print(
        f"trained loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

buf = io.BytesIO()
torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 2}, buf)
del model, opt, loss
if device == "cuda":
    torch.cuda.empty_cache()
    print(
        f"saved {buf.tell()} bytes allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.device("meta"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
buf.seek(0)
ckpt = torch.load(buf, map_location=device)
model.load_state_dict(ckpt["model"], assign=True)
with torch.device(device):
    model.model.rotary_emb = LlamaRotaryEmbedding(config=cfg)
model.train()
opt = torch.optim.AdamW(
    model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=device == "cuda"
)
opt.load_state_dict(ckpt["optim"])
start = ckpt["step"]
del ckpt
if device == "cuda":
    print(
        f"restored allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

for step in range(start, start + 2):
    loss = train_step(step, "resume")
if device == "cuda":
    print(
        f"resumed loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode():
    x = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    val = model(input_ids=x, labels=x).loss
if device == "cuda":
    print(
        f"eval loss {val.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
