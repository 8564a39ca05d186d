"""Two ways of shrinking what autograd keeps, tried one after the other on HF RoBERTa-large (from
RobertaConfig, sequence classification over 3 labels, fp32, AdamW): first
torch.autograd.graph.saved_tensors_hooks that store every saved float32 tensor of 64K elements or
more as a bfloat16 copy and cast it back when backward unpacks it (2 steps), then
torch.autograd.graph.save_on_cpu(pin_memory=True), which moves every saved tensor to pinned host
memory (2 steps); batch 16 x 256 tokens with a padding mask; 6 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import RobertaConfig, RobertaForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11407)
B, L = (2, 32) if SMALL else (16, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"

cfg = RobertaConfig(
    vocab_size=50265,
    hidden_size=128 if SMALL else 1024,
    num_hidden_layers=2 if SMALL else 24,
    num_attention_heads=4 if SMALL else 16,
    intermediate_size=512 if SMALL else 4096,
    max_position_embeddings=514,
    num_labels=3,
)
model = RobertaForSequenceClassification(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)


def pack(x):
    if x.dtype == torch.float32 and x.numel() >= 1 << 16:
        return ("bf16", x.to(torch.bfloat16))
    return ("raw", x)


def unpack(packed):
    kind, x = packed
    return x.float() if kind == "bf16" else x


def batch():
    lengths = torch.randint(L // 4, L + 1, (B,), device=device)
    attn = (torch.arange(L, device=device)[None] < lengths[:, None]).long()
    ids = torch.randint(3, cfg.vocab_size, (B, L), device=device) * attn + cfg.pad_token_id * (1 - attn)
    return ids, attn, torch.randint(0, 3, (B,), device=device)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(4):
    ids, attn, y = batch()
    if step < 2:
        ctx = torch.autograd.graph.saved_tensors_hooks(pack, unpack)
    else:
        ctx = torch.autograd.graph.save_on_cpu(pin_memory=device == "cuda")
    with ctx:
        logits = model(input_ids=ids, attention_mask=attn).logits
        loss = F.cross_entropy(logits, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} {'bf16 hooks' if step < 2 else 'save_on_cpu'} loss {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, attn, y, logits, loss
