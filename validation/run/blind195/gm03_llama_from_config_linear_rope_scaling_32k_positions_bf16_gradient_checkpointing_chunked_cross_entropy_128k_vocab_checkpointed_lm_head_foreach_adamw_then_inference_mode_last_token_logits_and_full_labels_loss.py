"""Long-context fine-tuning of a Llama-3-shaped model built from a transformers LlamaConfig, with the loss
over the 128,256-token vocabulary computed in chunks so the full logits never exist.

Model: LlamaForCausalLM(LlamaConfig(vocab 128,256, hidden 1,024, intermediate 3,584, 8 layers, 16 heads,
4 key/value heads, max_position_embeddings 32,768, rope_theta 500,000 with linear RoPE scaling factor 4,
untied embeddings, attn_implementation "sdpa")), moved to the GPU in bfloat16 by .to(), gradient
checkpointing on (use_reentrant=False), use_cache off. Training at 1 x 16,384 tokens: the hidden states
from model.model, then the lm_head + cross-entropy over chunks of 2,048 positions, each chunk under
torch.utils.checkpoint so its 2,048 x 128,256 logits are recomputed in backward; the summed loss is
divided by the token count. foreach AdamW (lr 2e-5, weight decay 0.0) on the bf16 parameters, clipping
at 1.0.

Phases: the first step; 2 more steps; evaluation under torch.inference_mode at 1 x 32,768 tokens keeping
only the last position's logits (logits_to_keep=1); then a no_grad loss through the model's own `labels`
path (full fp32-upcast logits) at 1 x 4,096 for comparison with the chunked loss. 4 phases."""

import os

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19503)
if SMALL:
    cfg = dict(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    SEQ, CHUNK, STEPS, EVAL_SEQ, LABEL_SEQ = 256, 64, 1, 512, 128
else:
    cfg = dict(
        vocab_size=128256,
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
    )
    SEQ, CHUNK, STEPS, EVAL_SEQ, LABEL_SEQ = 16384, 2048, 2, 32768, 4096
device = "cuda" if torch.cuda.is_available() else "cpu"

config = LlamaConfig(
    **cfg,
    max_position_embeddings=32768,
    rope_theta=500000.0,
    rope_scaling={"rope_type": "linear", "factor": 4.0},
    tie_word_embeddings=False,
    use_cache=False,
    attn_implementation="sdpa",
)
model = LlamaForCausalLM(config).to(dtype=torch.bfloat16, device=device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.0, foreach=True)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def chunk_loss(h, w, y):
    logits = F.linear(h, w).float()
    return F.cross_entropy(logits, y, reduction="sum")


def chunked_ce(hidden, labels):
    # hidden: (1, T, D) for positions 0..T-2 predicting labels 1..T-1
    h = hidden[0, :-1]
    y = labels[0, 1:]
    total = hidden.new_zeros((), dtype=torch.float32)
    for s in range(0, h.shape[0], CHUNK):
        total = total + checkpoint(
            chunk_loss, h[s : s + CHUNK], model.lm_head.weight, y[s : s + CHUNK], use_reentrant=False
        )
    return total / y.numel()


def train_step():
    ids = torch.randint(0, config.vocab_size, (1, SEQ), device=device)
    hidden = model.model(input_ids=ids).last_hidden_state
    loss = chunked_ce(hidden, ids)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = train_step()
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode():
    ids = torch.randint(0, config.vocab_size, (1, EVAL_SEQ), device=device)
    out = model(input_ids=ids, logits_to_keep=1)
    top = out.logits[:, -1].float().softmax(-1).max(-1)
print(f"32k prompt: next-token prob {top.values.item():.5f} id {top.indices.item()}")
del out
if device == "cuda":
    print(f"long eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    ids = torch.randint(0, config.vocab_size, (1, LABEL_SEQ), device=device)
    ref = model(input_ids=ids, labels=ids).loss
    hidden = model.model(input_ids=ids).last_hidden_state
    mine = chunked_ce(hidden, ids)
print(f"labels loss {ref.item():.4f} chunked loss {mine.item():.4f}")
if device == "cuda":
    print(f"labels allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
