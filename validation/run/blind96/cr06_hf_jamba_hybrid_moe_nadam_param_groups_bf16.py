"""HF transformers Jamba (hybrid Mamba / attention with mixture-of-experts MLPs on every other
layer) built from a config at 8 layers (attention at layer 4, the rest Mamba through the
sequential slow path: no mamba-ssm kernels), 1,024 wide, 16 heads with 4 KV heads, 8 experts
top-2, a 32,000 vocabulary, bf16 weights; NAdam with decoupled weight decay over two parameter
groups (no decay for norms, biases and Mamba's A_log and D), a SequentialLR of linear warm-up then
cosine decay, router auxiliary loss, batch 4 x 512 tokens, 3 steps, then an eval forward under
no_grad; 5 phases."""

import os

import torch
from transformers import JambaConfig, JambaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9606)
if SMALL:
    cfg = JambaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts=4,
        attn_layer_period=4,
        attn_layer_offset=2,
    )
    B, L = 2, 16
else:
    cfg = JambaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2048,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        num_experts=8,
        attn_layer_period=8,
        attn_layer_offset=4,
    )
    B, L = 4, 512
cfg.use_mamba_kernels = False
cfg.output_router_logits = True
cfg.router_aux_loss_coef = 0.01
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = JambaForCausalLM(cfg).to(device=device, dtype=dtype)
model.train()
decay, no_decay = [], []
for name, p in model.named_parameters():
    (no_decay if p.ndim < 2 or name.endswith(("A_log", "D")) else decay).append(p)
optimizer = torch.optim.NAdam(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-4,
    decoupled_weight_decay=True,
)
warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=2)
cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=100)
sched = torch.optim.lr_scheduler.SequentialLR(optimizer, [warmup, cosine], milestones=[2])
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, cfg.vocab_size, (B, L), device=device)
    out = model(input_ids=ids, labels=ids, use_cache=False)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    sched.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} aux {out.aux_loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, out
model.eval()
with torch.no_grad():
    ids = torch.randint(0, cfg.vocab_size, (B, L), device=device)
    top = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits.argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(top.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
