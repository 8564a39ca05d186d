"""GradCache contrastive training of a dual encoder larger than its batch fits: HF transformers
Data2VecText query and passage encoders (two towers, 6 layers, 768 wide, vocabulary 50,265, dropout
on) under bf16 autocast; per step 512 queries of 64 tokens and 512 passages of 256 tokens: first all
representations in chunks of 64 under no_grad (the CUDA RNG state saved before each chunk with
torch.cuda.get_rng_state), the in-batch InfoNCE loss on the cached representations and their
gradients, then each chunk re-encoded with the saved RNG state restored (set_rng_state) and
backpropagated with its representation's gradient; AdamW over both towers, 3 steps; then query
embeddings of 1,024 sequences under inference_mode; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import Data2VecTextConfig, Data2VecTextModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9806)
if SMALL:
    cfg = Data2VecTextConfig(
        vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    N, CHUNK, LQ, LP, NE = 8, 4, 8, 16, 8
else:
    cfg = Data2VecTextConfig(
        vocab_size=50265, hidden_size=768, num_hidden_layers=6, num_attention_heads=12, intermediate_size=3072
    )
    N, CHUNK, LQ, LP, NE = 512, 64, 64, 256, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
get_state = torch.cuda.get_rng_state if device == "cuda" else torch.get_rng_state
set_state = torch.cuda.set_rng_state if device == "cuda" else torch.set_rng_state
q_enc = Data2VecTextModel(cfg, add_pooling_layer=False).to(device)
p_enc = Data2VecTextModel(cfg, add_pooling_layer=False).to(device)
optimizer = torch.optim.AdamW(list(q_enc.parameters()) + list(p_enc.parameters()), lr=2e-5)


def embed(enc, ids):
    with torch.autocast(device, dtype=torch.bfloat16):
        return F.normalize(enc(input_ids=ids).last_hidden_state[:, 0].float(), dim=-1)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
q_enc.train()
p_enc.train()
for step in range(3):
    queries = torch.randint(3, cfg.vocab_size, (N, LQ), device=device)
    passages = torch.randint(3, cfg.vocab_size, (N, LP), device=device)
    reps, states = {}, {}
    with torch.no_grad():
        for key, enc, ids in (("q", q_enc, queries), ("p", p_enc, passages)):
            chunks = []
            for i, chunk in enumerate(ids.split(CHUNK)):
                states[key, i] = get_state()
                chunks.append(embed(enc, chunk))
            reps[key] = torch.cat(chunks)
    q_rep = reps["q"].requires_grad_()
    p_rep = reps["p"].requires_grad_()
    loss = F.cross_entropy(q_rep @ p_rep.T / 0.05, torch.arange(N, device=device))
    loss.backward()
    for key, enc, ids, rep in (("q", q_enc, queries, q_rep), ("p", p_enc, passages, p_rep)):
        for i, (chunk, grad) in enumerate(zip(ids.split(CHUNK), rep.grad.split(CHUNK), strict=True)):
            set_state(states[key, i])
            torch.dot(embed(enc, chunk).flatten(), grad.flatten()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del reps, states, q_rep, p_rep, loss
q_enc.eval()
with torch.inference_mode():
    emb = torch.cat(
        [embed(q_enc, c) for c in torch.randint(3, cfg.vocab_size, (NE, LQ), device=device).split(256)]
    )
if device == "cuda":
    print(
        f"eval {tuple(emb.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
