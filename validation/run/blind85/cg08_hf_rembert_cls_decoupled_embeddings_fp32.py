"""HF RemBertForSequenceClassification (decoupled 256-wide input embeddings projected to the
hidden size, untied output) built from its config, 12 layers, 768 wide, a 250,300 vocabulary, fp32,
batch 16 x 384 padded by length, RAdam with decoupled weight decay, 3 steps, then an eval pass
under inference_mode; 5 phases."""

import os

import torch
from transformers import RemBertConfig, RemBertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8508)
if SMALL:
    config = RemBertConfig(
        vocab_size=128,
        hidden_size=32,
        input_embedding_size=16,
        output_embedding_size=16,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        num_labels=3,
    )
    B, L = 2, 16
else:
    config = RemBertConfig(
        vocab_size=250300,
        hidden_size=768,
        input_embedding_size=256,
        output_embedding_size=1664,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        max_position_embeddings=512,
        num_labels=3,
    )
    B, L = 16, 384
device = "cuda" if torch.cuda.is_available() else "cpu"
model = RemBertForSequenceClassification(config).to(device)
optimizer = torch.optim.RAdam(model.parameters(), lr=3e-5, weight_decay=0.01, decoupled_weight_decay=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def batch():
    lengths = torch.randint(L // 4, L + 1, (B,), device=device)
    width = int(lengths.max())
    ids = torch.randint(5, config.vocab_size, (B, width), device=device)
    mask = (torch.arange(width, device=device)[None, :] < lengths[:, None]).long()
    return ids * mask, mask


model.train()
for step in range(3):
    ids, mask = batch()
    labels = torch.randint(0, 3, (B,), device=device)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} width {ids.shape[1]} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, mask, labels, loss
model.eval()
with torch.inference_mode():
    ids, mask = batch()
    probs = model(input_ids=ids, attention_mask=mask).logits.softmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(probs.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
