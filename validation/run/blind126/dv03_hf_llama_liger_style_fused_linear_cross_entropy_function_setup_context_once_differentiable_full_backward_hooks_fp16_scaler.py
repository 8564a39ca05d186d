"""A Liger-style fused linear cross-entropy written as a torch.autograd.Function with a separate
setup_context: its forward walks the tokens in chunks of 2,048, computes each chunk's logits in
fp32 from the bf16 hidden states and the LM head, its loss and the gradients of hidden states and
head weight in place (so no full logits tensor survives), and its @once_differentiable backward
only scales the stored gradients; it trains a Llama from LlamaConfig (1,024 wide, 12 layers, 16
heads with 4 KV heads, vocabulary 128,256, SDPA) under fp16 autocast with GradScaler and a fused
AdamW, batch 8 x 1,024; forward pre-hooks on every MLP keep input RMS statistics and full backward
hooks on every attention output projection keep gradient norms (both as CUDA tensors); 3 steps,
then a perplexity evaluation under inference_mode by chunked cross-entropy; 5 phases."""

import os

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12603)
if SMALL:
    cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    B, T, CHUNK = 2, 64, 32
else:
    cfg = LlamaConfig(
        vocab_size=128256,
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        rope_theta=500000.0,
        tie_word_embeddings=False,
    )
    B, T, CHUNK = 8, 1024, 2048
cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"


class FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(hidden, weight, target, chunk):
        n = hidden.shape[0]
        grad_h = torch.empty_like(hidden)
        grad_w = torch.zeros_like(weight, dtype=torch.float32)
        total = torch.zeros((), device=hidden.device, dtype=torch.float32)
        for s in range(0, n, chunk):
            h = hidden[s : s + chunk]
            logits = (h @ weight.t()).float()
            tgt = target[s : s + chunk]
            lse = torch.logsumexp(logits, -1)
            total += (lse - logits.gather(1, tgt[:, None]).squeeze(1)).sum()
            probs = torch.exp(logits - lse[:, None])
            probs[torch.arange(len(tgt), device=tgt.device), tgt] -= 1.0
            probs /= n
            g = probs.to(hidden.dtype)
            grad_h[s : s + chunk] = g @ weight
            grad_w.addmm_(g.t().float(), h.float())
            del logits, probs, g
        return total / n, grad_h, grad_w.to(weight.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, grad_h, grad_w = output
        ctx.save_for_backward(grad_h, grad_w)
        ctx.mark_non_differentiable(grad_h, grad_w)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss, _gh, _gw):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_loss.to(grad_h.dtype), grad_w * grad_loss.to(grad_w.dtype), None, None


def fused_loss(hidden, head, target):
    loss, _, _ = FusedLinearCrossEntropy.apply(hidden.flatten(0, 1), head.weight, target.flatten(), CHUNK)
    return loss


model = LlamaForCausalLM(cfg).to(device)
stats = {"rms": [], "grad": []}


def pre_hook(module, args):
    with torch.no_grad():
        stats["rms"].append(args[0].float().pow(2).mean().sqrt())


def bwd_hook(module, grad_input, grad_output):
    stats["grad"].append(grad_output[0].float().norm())


for layer in model.model.layers:
    layer.mlp.register_forward_pre_hook(pre_hook)
    layer.self_attn.o_proj.register_full_backward_hook(bwd_hook)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device == "cuda")
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
amp_dtype = torch.float16 if device == "cuda" else torch.bfloat16
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    ids = torch.randint(0, cfg.vocab_size, (B, T + 1), device=device)
    with torch.autocast(device, dtype=amp_dtype):
        hidden = model.model(input_ids=ids[:, :-1]).last_hidden_state
        loss = fused_loss(hidden, model.lm_head, ids[:, 1:])
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    rms = torch.stack(stats["rms"]).mean()
    gnorm = torch.stack(stats["grad"]).mean()
    stats = {"rms": [], "grad": []}
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} rms {rms.item():.3f} attn-grad {gnorm.item():.3e}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, hidden, loss, gn
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=amp_dtype):
    ids = torch.randint(0, cfg.vocab_size, (B * 2, T + 1), device=device)
    hidden = model.model(input_ids=ids[:, :-1]).last_hidden_state
    n = hidden.shape[0] * hidden.shape[1]
    nll = (
        sum(
            F.cross_entropy(model.lm_head(h).float(), t, reduction="sum")
            for h, t in zip(hidden.flatten(0, 1).split(CHUNK), ids[:, 1:].flatten().split(CHUNK), strict=True)
        )
        / n
    )
if device == "cuda":
    print(
        f"eval ppl {nll.exp().item():.1f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke ppl {nll.exp().item():.1f}")
