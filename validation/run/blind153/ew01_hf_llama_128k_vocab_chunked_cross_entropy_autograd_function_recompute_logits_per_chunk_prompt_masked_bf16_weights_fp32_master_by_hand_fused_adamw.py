"""A Llama model from LlamaConfig with Llama 3's 128,256-token vocabulary (1,024 wide, 8 layers,
16 heads with 4 KV heads, SwiGLU of 2,816, untied head, SDPA) trained for supervised fine-tuning
with two memory tricks written by hand: the loss is a chunked cross-entropy, a
torch.autograd.Function that takes the final hidden states and the head's weight, computes the
logits 1,024 rows at a time in the forward (only the summed loss is kept) and recomputes them per
chunk in the backward to form softmax minus one-hot and the two gradients, so the 8,192 x 128,256
logits never exist at once; and the model's weights are bf16 while fp32 master copies live beside
them: the bf16 gradients are cast into the masters' .grad, the masters clipped and stepped by a
fused AdamW, then copied back into the bf16 weights. The prompt tokens of every sequence (a random
prompt length of 64..512) carry the label -100. Batch 8 x 1,024; 3 steps; then a validation loss
under no_grad through the same Function; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15301)
if SMALL:
    cfg = LlamaConfig(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    B, T, CHUNK, PMIN, PMAX = 2, 64, 32, 4, 32
else:
    cfg = LlamaConfig(
        vocab_size=128256,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        rope_theta=500000.0,
        tie_word_embeddings=False,
    )
    B, T, CHUNK, PMIN, PMAX = 8, 1024, 1024, 64, 512
cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
IGNORE = -100


class ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of hidden @ weight.T against labels, CHUNK rows at a time."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, chunk):
        n = hidden.shape[0]
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for s in range(0, n, chunk):
            logits = hidden[s : s + chunk] @ weight.t()
            total += F.cross_entropy(
                logits.float(), labels[s : s + chunk], ignore_index=IGNORE, reduction="sum"
            )
            del logits
        count = (labels != IGNORE).sum().clamp(min=1).float()
        ctx.save_for_backward(hidden, weight, labels, count)
        ctx.chunk = chunk
        return total / count

    @staticmethod
    def backward(ctx, grad_loss):
        hidden, weight, labels, count = ctx.saved_tensors
        chunk = ctx.chunk
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        scale = grad_loss / count
        for s in range(0, hidden.shape[0], chunk):
            h = hidden[s : s + chunk]
            y = labels[s : s + chunk]
            valid = y != IGNORE
            probs = torch.softmax((h @ weight.t()).float(), dim=-1)
            rows = torch.arange(h.shape[0], device=h.device)
            probs[rows, y.clamp(min=0)] -= 1.0
            probs *= (valid.float() * scale)[:, None]
            g = probs.to(hidden.dtype)
            del probs
            grad_hidden[s : s + chunk] = g @ weight
            grad_weight.addmm_(g.t().float(), h.float())
            del g
        return grad_hidden, grad_weight.to(weight.dtype), None, None


model = LlamaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
params = [p for p in model.parameters() if p.requires_grad]
masters = [p.detach().float().clone().requires_grad_(True) for p in params]
opt = torch.optim.AdamW(masters, lr=2e-5, betas=(0.9, 0.95), weight_decay=0.0, fused=device == "cuda")
if device == "cuda":
    print(
        f"params {sum(p.numel() for p in params)} allocated {torch.cuda.memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def batch():
    ids = torch.randint(0, cfg.vocab_size, (B, T + 1), device=device)
    prompt = torch.randint(PMIN, PMAX + 1, (B, 1), device=device)
    labels = ids[:, 1:].clone()
    labels[torch.arange(T, device=device)[None, :] < prompt - 1] = IGNORE
    return ids[:, :-1], labels


def loss_of(ids, labels):
    hidden = model.model(input_ids=ids).last_hidden_state
    return ChunkedCrossEntropy.apply(
        hidden.reshape(-1, cfg.hidden_size), model.lm_head.weight, labels.reshape(-1), CHUNK
    )


model.train()
for step in range(3):
    ids, labels = batch()
    loss = loss_of(ids, labels)
    loss.backward()
    for p, m in zip(params, masters, strict=True):
        m.grad = p.grad.float()
        p.grad = None
    torch.nn.utils.clip_grad_norm_(masters, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        for p, m in zip(params, masters, strict=True):
            p.copy_(m)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    ids, labels = batch()
    val = loss_of(ids, labels)
if device == "cuda":
    print(
        f"val loss {val.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
