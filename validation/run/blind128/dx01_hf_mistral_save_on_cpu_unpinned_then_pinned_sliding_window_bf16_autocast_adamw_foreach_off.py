"""A Mistral model from MistralConfig (1,024 wide, 12 layers, 16 heads with 4 KV heads, SwiGLU of
3,584, vocabulary 32,000, a 512-token sliding window, SDPA, fp32 weights) trained under bf16
autocast with AdamW (foreach=False) on batches of 4 x 1,024 tokens: one step as it is, one step with
the activations offloaded by torch.autograd.graph.save_on_cpu(pin_memory=False), one with
save_on_cpu(pin_memory=True), then a no_grad evaluation; 5 phases."""

import os

import torch
from transformers import MistralConfig, MistralForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12801)
if SMALL:
    cfg = MistralConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        sliding_window=32,
    )
    B, T = 2, 64
else:
    cfg = MistralConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        sliding_window=512,
    )
    B, T = 4, 1024
cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MistralForCausalLM(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=False)


def step(offload):
    ids = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    if offload is None:
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    else:
        with torch.autograd.graph.save_on_cpu(pin_memory=offload):
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for name, offload in (("plain", None), ("save_on_cpu", False), ("save_on_cpu pinned", True)):
    loss = step(offload)
    if device == "cuda":
        print(
            f"{name} loss {loss:.3f} allocated {torch.cuda.memory_allocated()}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    ids = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    val = model(input_ids=ids, labels=ids).loss
if device == "cuda":
    print(
        f"eval loss {val.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke eval {val.item():.3f}")
