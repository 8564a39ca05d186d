"""Long-context extension of a LlamaForCausalLM (1024 wide, 6 layers, GQA 16/4, untied 32k vocab) from an
8,192-token original context to 32,768 with YaRN rope scaling (rope_parameters rope_type "yarn", factor 4),
fine-tuned with peft OSF (orthogonal subspace fine-tuning: every attention projection is split by an SVD
into a frozen high-rank part and a trainable low-rank part, effective_rank 512; the trainable factors are
kept in fp32, the rest in bf16). Training at batch 1 under bf16 autocast with AdamW, gradient checkpointing
(gradient_checkpointing_enable, use_reentrant False) and a chunked loss written by hand: the decoder's last
hidden states are cut into 2,048-token chunks and each chunk's lm_head + cross-entropy runs inside
torch.utils.checkpoint so the full 32k-vocab logits never exist at once. One step at 8,192 tokens, one at
16,384; then a no_grad chunked evaluation of a 32,768-token sequence.

Phases: 0 model built and OSF applied; 1 step at 8k; 2 step at 16k; 3 chunked 32k evaluation."""

import os

import torch
import torch.nn.functional as F
from peft import OSFConfig, get_peft_model
from torch.utils.checkpoint import checkpoint
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3275)
if SMALL:
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        max_position_embeddings=256,
    )
    RANK, CHUNK, LENS, EVAL = 32, 32, (64, 128), 256
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=6,
        num_attention_heads=16,
        num_key_value_heads=4,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 500000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        max_position_embeddings=32768,
    )
    RANK, CHUNK, LENS, EVAL = 512, 2048, (8192, 16384), 32768
config.tie_word_embeddings = False
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model = get_peft_model(
    model, OSFConfig(effective_rank=RANK, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
)
for p in model.parameters():
    if p.requires_grad:
        p.data = p.data.float()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
params = [p for p in model.parameters() if p.requires_grad]
print("trainable", sum(p.numel() for p in params), "tensors", len(params))
optimizer = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0)
decoder = model.get_base_model().model
lm_head = model.get_base_model().lm_head
report("osf_built")


def chunk_loss(h, labels):
    logits = lm_head(h).float()
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")


def chunked_loss(hidden, ids, grad):
    n = ids.shape[1] - 1
    total = hidden.new_zeros((), dtype=torch.float32)
    for s in range(0, n, CHUNK):
        e = min(s + CHUNK, n)
        if grad:
            total = total + checkpoint(chunk_loss, hidden[:, s:e], ids[:, s + 1 : e + 1], use_reentrant=False)
        else:
            total = total + chunk_loss(hidden[:, s:e], ids[:, s + 1 : e + 1])
    return total / n


model.train()
for step, seq in enumerate(LENS):
    ids = torch.randint(3, config.vocab_size, (1, seq), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        hidden = decoder(input_ids=ids, use_cache=False).last_hidden_state
        loss = chunked_loss(hidden, ids, grad=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} len {seq} loss {loss.item():.4f}")
    del hidden, loss
    report(f"train_{seq}")

model.eval()
ids = torch.randint(3, config.vocab_size, (1, EVAL), device=device)
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    hidden = decoder(input_ids=ids, use_cache=False).last_hidden_state
    nll = chunked_loss(hidden, ids, grad=False)
print(f"eval len {EVAL} ppl {nll.exp().item():.1f}")
report("eval_32k")
