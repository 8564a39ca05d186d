"""The optimizer step fused into the backward pass as PyTorch's tutorial on it writes it: a Llama
from LlamaConfig (1,024 wide, 8 layers, 16 heads with 4 KV heads, MLP 2,816, vocabulary 32,000,
SDPA) with bf16 parameters; first one ordinary step with a global AdamW (foreach) to compare, then
its states and gradients dropped and one AdamW per parameter (foreach off) stepped and zeroed by
Tensor.register_post_accumulate_grad_hook inside backward, each parameter's incoming gradient
clamped to [-1, 1] by a Tensor.register_hook first, and the final hidden states' gradient scaled
by a hook on that activation; batch 4 x 1,024; 2 steps in backward, then a validation loss under
no_grad; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14902)
if SMALL:
    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    B, T = 2, 32
else:
    cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
    )
    B, T = 4, 1024
cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"

model = LlamaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
model.train()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch():
    ids = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    return ids, ids.clone()


# one ordinary step with a global optimizer
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
ids, labels = batch()
loss = model(input_ids=ids, labels=labels).loss
loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
if device == "cuda":
    print(
        f"global adamw loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
del opt, loss
if device == "cuda":
    print(f"after dropping the global optimizer {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

# optimizer in backward
optimizer_dict = {
    p: torch.optim.AdamW([p], lr=1e-4, weight_decay=0.01, foreach=False) for p in model.parameters()
}


def optimizer_hook(parameter):
    optimizer_dict[parameter].step()
    optimizer_dict[parameter].zero_grad(set_to_none=True)


handles = []
for p in model.parameters():
    handles.append(p.register_hook(lambda g: g.clamp(-1.0, 1.0)))
    handles.append(p.register_post_accumulate_grad_hook(optimizer_hook))


def scale_hidden_grad(module, args, output):
    output.last_hidden_state.register_hook(lambda g: g * 0.5)


handles.append(model.model.register_forward_hook(scale_hidden_grad))

for s in range(2):
    ids, labels = batch()
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    if device == "cuda":
        print(
            f"in-backward step {s} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
            f" grads {sum(p.grad is not None for p in model.parameters())}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss

for h in handles:
    h.remove()
model.eval()
with torch.no_grad():
    ids, labels = batch()
    logits = model(input_ids=ids).logits
    val = F.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab_size).float(), labels[:, 1:].reshape(-1))
if device == "cuda":
    print(
        f"val loss {val.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
