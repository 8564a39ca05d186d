"""HF transformers HunYuan-V1 dense (Llama-like with QK RMS-norm) built from a config at 8 layers,
1,024 wide, 16 heads / 4 KV heads, vocabulary 120,000 (untied), in bf16, fine-tuned by gradual
unfreezing: every parameter frozen but the top two layers, the final norm and the LM head, AdamW
over those; after 2 steps the next two layers are unfrozen and join the optimizer through
add_param_group, 2 more steps, then the whole model (embeddings included) for 2 steps; batch 4 x
768 tokens; then a no_grad eval loss on 8 x 768; 7 phases."""

import os

import torch
from transformers import HunYuanDenseV1Config, HunYuanDenseV1ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10301)
if SMALL:
    cfg = HunYuanDenseV1Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    B, S = 2, 32
else:
    cfg = HunYuanDenseV1Config(
        vocab_size=120000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=4096,
    )
    B, S = 4, 768
cfg.tie_word_embeddings = False
device = "cuda" if torch.cuda.is_available() else "cpu"
model = HunYuanDenseV1ForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
layers = model.model.layers
n = len(layers)
for p in model.parameters():
    p.requires_grad_(False)
stage0 = (
    list(layers[n - 2 :].parameters())
    + list(model.model.norm.parameters())
    + list(model.lm_head.parameters())
)
for p in stage0:
    p.requires_grad_(True)
optimizer = torch.optim.AdamW(stage0, lr=2e-4, weight_decay=0.0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(6):
    if step == 2:
        stage1 = list(layers[n - 4 : n - 2].parameters())
        for p in stage1:
            p.requires_grad_(True)
        optimizer.add_param_group({"params": stage1, "lr": 1e-4})
    if step == 4:
        rest = [p for p in model.parameters() if not p.requires_grad]
        for p in rest:
            p.requires_grad_(True)
        optimizer.add_param_group({"params": rest, "lr": 5e-5})
    ids = torch.randint(3, cfg.vocab_size, (B, S), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss
model.eval()
with torch.no_grad():
    ids = torch.randint(3, cfg.vocab_size, (2 * B, S), device=device)
    eval_loss = model(input_ids=ids, labels=ids).loss
if device == "cuda":
    print(
        f"eval {eval_loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
