"""HF transformers LayoutLM (BERT with 2-D box position embeddings) built from a config at 8 layers,
768 wide, 12 heads, token classification over 13 form-field tags (FUNSD-like), fp32 weights under
bf16 autocast with AdamW; each batch is 12 documents of up to 512 words whose lengths, boxes (0..1000
grid, words laid out in lines) and tags (-100 past the length) are built on the host and copied to
the GPU with the attention mask; Fast Gradient Method adversarial training: after the clean
backward the word-embedding matrix is moved by eps * grad / ||grad||, a second forward/backward on
the same batch adds its gradients, and the matrix is restored from a backup by rebinding .data;
3 steps, then a no_grad eval pass with argmax predictions; 4 phases."""

import os
import random

import torch
from transformers import LayoutLMConfig, LayoutLMForTokenClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10302)
rng = random.Random(10302)
if SMALL:
    cfg = LayoutLMConfig(
        vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    B, S = 2, 24
else:
    cfg = LayoutLMConfig(
        vocab_size=30522, hidden_size=768, num_hidden_layers=8, num_attention_heads=12, intermediate_size=3072
    )
    B, S = 12, 512
cfg.num_labels = 13
EPS = 1.0
device = "cuda" if torch.cuda.is_available() else "cpu"


def batch():
    ids, boxes, tags, mask = [], [], [], []
    for _ in range(B):
        n = rng.randint(S // 2, S)
        row_ids, row_boxes, x, y = [], [], 20, 20
        for _w in range(n):
            w = rng.randint(15, 120)
            if x + w > 980:
                x, y = 20, min(y + 25, 975)
            row_boxes.append([x, y, x + w, y + 20])
            row_ids.append(rng.randint(5, cfg.vocab_size - 1))
            x += w + 8
        pad = S - n
        ids.append(row_ids + [0] * pad)
        boxes.append(row_boxes + [[0, 0, 0, 0]] * pad)
        tags.append([rng.randint(0, cfg.num_labels - 1) for _ in range(n)] + [-100] * pad)
        mask.append([1] * n + [0] * pad)
    return tuple(torch.tensor(t).to(device) for t in (ids, boxes, mask, tags))


model = LayoutLMForTokenClassification(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01)
emb = model.layoutlm.embeddings.word_embeddings.weight
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    ids, bbox, mask, tags = batch()
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, bbox=bbox, attention_mask=mask, labels=tags).loss
    loss.backward()
    backup = emb.data.clone()
    norm = torch.norm(emb.grad)
    if norm != 0 and not torch.isnan(norm):
        emb.data.add_(EPS * emb.grad / norm)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss_adv = model(input_ids=ids, bbox=bbox, attention_mask=mask, labels=tags).loss
    loss_adv.backward()
    emb.data = backup
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} adv {loss_adv.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss, loss_adv, backup, norm
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    ids, bbox, mask, tags = batch()
    pred = model(input_ids=ids, bbox=bbox, attention_mask=mask).logits.argmax(-1)
    acc = (pred == tags)[tags != -100].float().mean()
if device == "cuda":
    print(
        f"eval acc {acc.item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
