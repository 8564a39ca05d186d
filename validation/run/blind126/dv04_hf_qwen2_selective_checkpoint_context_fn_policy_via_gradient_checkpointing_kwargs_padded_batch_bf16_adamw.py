"""A Qwen2 model from Qwen2Config (896 wide, 16 layers, 14 heads with 2 KV heads, SwiGLU of 4,864,
vocabulary 151,936, bf16 weights, SDPA) trained with gradient checkpointing whose kwargs carry a
selective-checkpoint context_fn: functools.partial(create_selective_checkpoint_contexts, policy)
where the policy saves every matmul (mm, addmm, bmm) and the SDPA's outputs and recomputes the
rest; use_reentrant=False. Right-padded batches of 8 x 1,536 tokens with random lengths (an
attention mask, -100 labels on the padding), AdamW over bf16 parameters with weight decay on the
matrices only, 3 steps; then the same batch size without checkpointing under no_grad to score the
validation loss; 5 phases."""

import functools
import os

import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
from transformers import Qwen2Config, Qwen2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12604)
if SMALL:
    cfg = Qwen2Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    B, T = 2, 64
else:
    cfg = Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=16,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    B, T = 8, 1536
cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
aten = torch.ops.aten
SAVE = {
    aten.mm.default,
    aten.addmm.default,
    aten.bmm.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
}


def policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in SAVE else CheckpointPolicy.PREFER_RECOMPUTE


model = Qwen2ForCausalLM(cfg).to(device, torch.bfloat16)
model.gradient_checkpointing_enable(
    gradient_checkpointing_kwargs={
        "use_reentrant": False,
        "context_fn": functools.partial(create_selective_checkpoint_contexts, policy),
    }
)
decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=1e-4,
    betas=(0.9, 0.95),
)


def batch():
    ids = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    lengths = torch.randint(T // 2, T + 1, (B,), device=device)
    mask = (torch.arange(T, device=device)[None] < lengths[:, None]).long()
    labels = ids.masked_fill(mask == 0, -100)
    return ids, mask, labels


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    ids, mask, labels = batch()
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, mask, labels, out
model.gradient_checkpointing_disable()
model.eval()
with torch.no_grad():
    ids, mask, labels = batch()
    val = model(input_ids=ids, attention_mask=mask, labels=labels).loss
if device == "cuda":
    print(
        f"val loss {val.item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke val {val.item():.3f}")
