"""Integrated gradients on an HF DistilBertForSequenceClassification (from a DistilBertConfig,
6 layers, 768 wide) in fp32 eval mode: the input embeddings interpolated from a zero baseline in 32
steps as one batch of 32 x 4 sentences of 256 tokens, forward through inputs_embeds, the target
logits' gradient w.r.t. the interpolated embeddings by torch.autograd.grad, averaged per sentence;
two sentence batches; 3 phases."""

import os

import torch
from transformers import DistilBertConfig, DistilBertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6405)
if SMALL:
    config = DistilBertConfig(vocab_size=100, dim=32, n_layers=1, n_heads=2, hidden_dim=64, num_labels=3)
    B, L, STEPS = 2, 16, 4
else:
    config = DistilBertConfig(num_labels=3)
    B, L, STEPS = 4, 256, 32
device = "cuda" if torch.cuda.is_available() else "cpu"
model = DistilBertForSequenceClassification(config).to(device).eval()
for p in model.parameters():
    p.requires_grad_(False)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    emb = model.distilbert.embeddings.word_embeddings(ids)
    alphas = torch.linspace(0, 1, STEPS, device=device).view(STEPS, 1, 1, 1)
    path = (alphas * emb).reshape(STEPS * B, L, -1).requires_grad_()
    logits = model(inputs_embeds=path).logits
    target = logits.reshape(STEPS, B, -1)[..., 1].sum()
    (grads,) = torch.autograd.grad(target, path)
    attribution = (emb * grads.reshape(STEPS, B, L, -1).mean(0)).sum(-1)
    del ids, emb, alphas, path, logits, target, grads, attribution
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
