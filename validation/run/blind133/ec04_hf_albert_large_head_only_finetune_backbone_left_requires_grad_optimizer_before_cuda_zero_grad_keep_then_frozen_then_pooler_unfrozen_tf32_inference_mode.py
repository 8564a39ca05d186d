"""Memory mistakes when fine-tuning only the head of a Hugging Face ALBERT-large classifier (built from
AlbertConfig: 24 layers sharing one group of weights, hidden 1,024, 16 heads, embedding 128, 30,000
tokens, 3 labels; fp32 with TF32 matmuls), batch 16 of 512 tokens: the model built on the CPU, the
AdamW optimizer created over the classifier's parameters and only then `model.cuda()`; the backbone
left with requires_grad=True, so every step backpropagates through all 24 layers and keeps the
backbone's gradients, which the optimizer's `zero_grad(set_to_none=False)` never touches, 2 steps;
then the fix: the backbone frozen by `requires_grad_(False)` and its gradients dropped by
`model.zero_grad(set_to_none=True)`, 2 steps; then the pooler unfrozen too and a new AdamW over
two groups, 2 steps; then evaluation under inference_mode at batch 64; 4 phases."""

import os

import torch
from transformers import AlbertConfig, AlbertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13304)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
B, S, EB = (2, 32, 4) if SMALL else (16, 512, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"

config = AlbertConfig(
    vocab_size=30000,
    embedding_size=128,
    hidden_size=128 if SMALL else 1024,
    num_hidden_layers=2 if SMALL else 24,
    num_attention_heads=2 if SMALL else 16,
    intermediate_size=256 if SMALL else 4096,
    max_position_embeddings=512,
    num_labels=3,
)
model = AlbertForSequenceClassification(config)
opt = torch.optim.AdamW(model.classifier.parameters(), lr=1e-3, weight_decay=0.01)
model.to(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def report(tag):
    if device == "cuda":
        print(
            f"{tag} allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def step(optimizer):
    ids = torch.randint(5, 30000, (B, S), device=device)
    mask = torch.ones(B, S, dtype=torch.long, device=device)
    mask[: B // 2, S - S // 4 :] = 0
    labels = torch.randint(0, 3, (B,), device=device)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
    return out.loss.item()


model.train()
losses = [step(opt) for _ in range(2)]
kept = sum(p.grad is not None for p in model.parameters())
report(f"backbone not frozen loss {losses[-1]:.3f} params with grad {kept}")

model.albert.requires_grad_(False)
model.zero_grad(set_to_none=True)
losses = [step(opt) for _ in range(2)]
report(f"backbone frozen loss {losses[-1]:.3f}")

model.albert.pooler.requires_grad_(True)
opt = torch.optim.AdamW(
    [
        {"params": model.albert.pooler.parameters(), "lr": 1e-4},
        {"params": model.classifier.parameters(), "lr": 1e-3},
    ],
    weight_decay=0.01,
)
losses = [step(opt) for _ in range(2)]
report(f"pooler unfrozen loss {losses[-1]:.3f}")

model.eval()
with torch.inference_mode():
    ids = torch.randint(5, 30000, (EB, S), device=device)
    pred = model(input_ids=ids).logits.argmax(-1)
report(f"eval predictions {pred.bincount(minlength=3).tolist()}")
