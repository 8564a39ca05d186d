"""torchvision swin_t (random init) inference under torch.inference_mode, predictions collected on the
host batch by batch."""

import os

import torch
import torchvision

B, IMG, N_BATCHES = (1, 64, 2) if os.environ.get("SMOKE") else (32, 224, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = torchvision.models.swin_t().to(device)
model.eval()
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

predictions = []
with torch.inference_mode():
    for i in range(N_BATCHES):
        batch = torch.randn(B, 3, IMG, IMG, device=device)
        logits = model(batch)
        predictions.append(logits.argmax(dim=1).cpu())
        if device == "cuda":
            print(
                f"batch {i} peak {torch.cuda.max_memory_allocated()} "
                f"allocated {torch.cuda.memory_allocated()}"
            )
            torch.cuda.reset_peak_memory_stats()
print(torch.cat(predictions).shape)
