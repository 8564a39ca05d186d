"""Low-rank factorization of a trained-shape decoder's Linear layers, then fine-tuning, as the SVD
compression recipes (the PyTorch forum's "compress a Linear with SVD", SVD-LLM's and ASVD's plain
truncation baseline, LoRD) write it: a Hugging Face LlamaForCausalLM built from config (12 layers,
1,024 wide, 16 heads with 4 key-value heads, intermediate 2,816, 32,000-token vocabulary, untied) in
fp32 on the GPU; every layer's q_proj and o_proj factorized at rank 256 and gate/up/down_proj at rank
384 by `torch.linalg.svd(W, full_matrices=False)` (W ~ (U_r * S_r) @ Vh_r), k_proj and v_proj at
rank 128 by the randomized `torch.svd_lowrank(W, q=128 + 8, niter=2)`, each replaced by
nn.Sequential(Linear(in, r, bias=False), Linear(r, out, bias=False)) holding Vh_r and U_r * S_r;
the model then cast to bf16 and fine-tuned pure bf16 with AdamW (lr 2e-5, foreach=False, the
single-tensor path), batches of 8 x 1,024 tokens, labels = input_ids. Phases: the dense model built
and evaluated under no_grad on one batch, the factorization, the first fine-tuning step, two more,
then an evaluation under no_grad over 2 batches and a greedy `generate()` of 64 new tokens for
4 prompts of 128; 5 phases."""

import os

import torch
import torch.nn as nn
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16905)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    CFG = dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=176,
        vocab_size=1000,
    )
    B, L, R_QO, R_MLP, R_KV, NEW, PROMPT = 2, 64, 16, 24, 8, 8, 16
else:
    CFG = dict(
        hidden_size=1024,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
        intermediate_size=2816,
        vocab_size=32000,
    )
    B, L, R_QO, R_MLP, R_KV, NEW, PROMPT = 8, 1024, 256, 384, 128, 64, 128
config = LlamaConfig(max_position_embeddings=2048, tie_word_embeddings=False, **CFG)
model = LlamaForCausalLM(config).to(device)
gen = torch.Generator().manual_seed(16905)


def tokens(n, length):
    return torch.randint(0, CFG["vocab_size"], (n, length), generator=gen).to(device)


model.eval()
with torch.no_grad():
    ids = tokens(B, L)
    dense_loss = model(input_ids=ids, labels=ids).loss.item()
print(f"dense params {sum(p.numel() for p in model.parameters())} loss {dense_loss:.4f}")
del ids
if device == "cuda":
    print(f"dense peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def low_rank(linear, rank, randomized=False):
    W = linear.weight.data
    if randomized:
        U, S, V = torch.svd_lowrank(W, q=rank + 8, niter=2)
        U, S, Vh = U[:, :rank], S[:rank], V[:, :rank].T
    else:
        U, S, Vh = torch.linalg.svd(W, full_matrices=False)
        U, S, Vh = U[:, :rank], S[:rank], Vh[:rank]
    first = nn.Linear(linear.in_features, rank, bias=False, device=W.device)
    second = nn.Linear(rank, linear.out_features, bias=False, device=W.device)
    first.weight.data.copy_(Vh)
    second.weight.data.copy_(U * S)
    return nn.Sequential(first, second)


with torch.no_grad():
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        attn.q_proj = low_rank(attn.q_proj, R_QO)
        attn.o_proj = low_rank(attn.o_proj, R_QO)
        attn.k_proj = low_rank(attn.k_proj, R_KV, randomized=True)
        attn.v_proj = low_rank(attn.v_proj, R_KV, randomized=True)
        mlp.gate_proj = low_rank(mlp.gate_proj, R_MLP)
        mlp.up_proj = low_rank(mlp.up_proj, R_MLP)
        mlp.down_proj = low_rank(mlp.down_proj, R_MLP)
model.to(torch.bfloat16)
print(f"factorized params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    print(f"factorize peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.0, foreach=False)
model.train()
for step in range(3):
    ids = tokens(B, L)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    del loss, ids
    if device == "cuda" and step in (0, 2):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    losses = []
    for _ in range(2):
        ids = tokens(B, L)
        losses.append(model(input_ids=ids, labels=ids).loss.item())
    prompts = tokens(4, PROMPT)
    out = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
    )
print(f"eval loss {sum(losses) / 2:.4f} generated {tuple(out.shape)}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
