"""ZeRO-Offload written by hand for a Mistral model from MistralConfig (1,024 wide, 6 layers, 16
heads with 8 KV heads, SwiGLU of 3,584, vocabulary 32,000, sliding window 1,024, SDPA): the GPU
holds only the bf16 weights, their gradients and the activations; the fp32 master weights and their
gradient buffers are pinned host tensors and the AdamW states live on the host. Each optimizer step
accumulates gradients over 2 micro-batches of 4 x 2,048 tokens (the model's own loss from labels),
copies every bf16 gradient into its pinned fp32 buffer with non_blocking=True and drops it from the
GPU, synchronizes, clips and steps AdamW on the CPU, then copies the masters back into the bf16
weights with non_blocking=True; 3 steps, then a validation perplexity under no_grad at batch 8;
5 phases."""

import math
import os

import torch
from transformers import MistralConfig, MistralForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15303)
if SMALL:
    cfg = MistralConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        sliding_window=32,
    )
    B, T, ACC = 2, 64, 2
else:
    cfg = MistralConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=6,
        num_attention_heads=16,
        num_key_value_heads=8,
        max_position_embeddings=4096,
        sliding_window=1024,
    )
    B, T, ACC = 4, 2048, 2
cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
pin = device == "cuda"

model = MistralForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
params = [p for p in model.parameters() if p.requires_grad]
host_master, host_grad = [], []
for p in params:
    m = torch.empty(p.shape, dtype=torch.float32, pin_memory=pin)
    m.copy_(p.detach())
    g = torch.empty(p.shape, dtype=torch.float32, pin_memory=pin)
    m.grad = g
    host_master.append(m)
    host_grad.append(g)
opt = torch.optim.AdamW(host_master, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.01)
if device == "cuda":
    n = sum(p.numel() for p in params)
    print(f"params {n} allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(b):
    ids = torch.randint(0, cfg.vocab_size, (b, T), device=device)
    return ids, ids.clone()


model.train()
for step in range(3):
    for _ in range(ACC):
        ids, labels = batch(B)
        loss = model(input_ids=ids, labels=labels).loss
        (loss / ACC).backward()
    for p, g in zip(params, host_grad, strict=True):
        g.copy_(p.grad, non_blocking=True)
        p.grad = None
    if device == "cuda":
        torch.cuda.synchronize()
    torch.nn.utils.clip_grad_norm_(host_master, 1.0)
    opt.step()
    with torch.no_grad():
        for p, m in zip(params, host_master, strict=True):
            p.copy_(m, non_blocking=True)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    ids, labels = batch(2 * B)
    val = model(input_ids=ids, labels=labels).loss
if device == "cuda":
    print(
        f"val ppl {math.exp(val.item()):.1f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
