"""Gradual magnitude pruning after Zhu and Gupta, "To prune, or not to prune" (the automated gradual
pruner's cubic schedule s_t = s_f + (s_i - s_f)(1 - t / n)^3, as Neural Magic's and Intel's
distillers write it), with torch.nn.utils.prune over a Hugging Face GPT-2 small built from config
(12 layers, 768 wide, 12 heads, the 50,257-token vocabulary tied, 1,024 positions): every stage
prunes all 48 transformer Conv1D weights (c_attn, attn.c_proj, c_fc, mlp.c_proj; 85M weights) by
`prune.global_unstructured(..., pruning_method=prune.L1Unstructured, amount=s_t)` (weight_orig
parameters, weight_mask buffers, the forward pre-hooks), fine-tunes with the masks in place, then
makes the pruning permanent with `prune.remove` before the next stage prunes again at the higher
sparsity (the zeros already made are the smallest magnitudes). fp32 with TF32 matmuls, AdamW (lr
1e-4, foreach, created before pruning: weight_orig is the same Parameter), batches of 8 x 512
tokens, labels = input_ids. Phases: the model built, stage 1 (sparsity 0.422: prune, 2 steps,
remove), stage 2 (0.578), stage 3 (0.6), then the sparsity report and a no_grad perplexity
evaluation over 4 batches of 8 x 1,024; 5 phases."""

import math
import os

import torch
import torch.nn.utils.prune as prune
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16902)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    CFG = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128)
    B, L, EVAL_L, STEPS_PER_STAGE, EVAL_N = 2, 32, 64, 1, 2
else:
    CFG = dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
    B, L, EVAL_L, STEPS_PER_STAGE, EVAL_N = 8, 512, 1024, 2, 4
S_I, S_F, N_STAGES = 0.0, 0.6, 3

model = GPT2LMHeadModel(GPT2Config(**CFG)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
to_prune = []
for block in model.transformer.h:
    to_prune += [(block.attn.c_attn, "weight"), (block.attn.c_proj, "weight")]
    to_prune += [(block.mlp.c_fc, "weight"), (block.mlp.c_proj, "weight")]
gen = torch.Generator().manual_seed(16902)
n_prunable = sum(m.weight.numel() for m, _ in to_prune)
print(f"params {sum(p.numel() for p in model.parameters())} prunable {n_prunable}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def tokens(n, length):
    return torch.randint(0, CFG["vocab_size"], (n, length), generator=gen).to(device)


def sparsity():
    zeros = sum(int((m.weight == 0).sum()) for m, _ in to_prune)
    return zeros / sum(m.weight.numel() for m, _ in to_prune)


model.train()
for stage in range(1, N_STAGES + 1):
    target = S_F + (S_I - S_F) * (1 - stage / N_STAGES) ** 3
    prune.global_unstructured(to_prune, pruning_method=prune.L1Unstructured, amount=target)
    for _ in range(STEPS_PER_STAGE):
        ids = tokens(B, L)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    for module, name in to_prune:
        prune.remove(module, name)
    print(f"stage {stage} target {target:.3f} loss {loss.item():.4f} sparsity {sparsity():.3f}")
    del loss, ids
    if device == "cuda":
        print(
            f"stage {stage} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
nll, count = 0.0, 0
with torch.no_grad():
    for _ in range(EVAL_N):
        ids = tokens(B, EVAL_L)
        out = model(input_ids=ids, labels=ids)
        nll += out.loss.item() * (EVAL_L - 1) * B
        count += (EVAL_L - 1) * B
print(f"final sparsity {sparsity():.3f} perplexity {math.exp(nll / count):.1f}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
