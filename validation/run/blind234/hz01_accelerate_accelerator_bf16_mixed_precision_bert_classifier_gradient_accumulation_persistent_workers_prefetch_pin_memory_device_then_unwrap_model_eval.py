"""Hugging Face Accelerate driving a BERT-base classifier from config (no download): `Accelerator(
mixed_precision="bf16", gradient_accumulation_steps=4)`, `accelerator.prepare` of the model, an AdamW
(fused) and a DataLoader with 2 persistent workers, prefetch_factor 4 and `pin_memory=True` /
`pin_memory_device="cuda"`; `accelerator.accumulate` with `accelerator.backward`, clip_grad_norm_ through
the accelerator; then `unwrap_model` and an evaluation under no_grad with larger batches.

Phases: model prepared; 8 micro-batches of 32 x 256 tokens (2 optimizer steps); eval of 4 batches of 128
x 256 under no_grad and bf16 autocast. Token ids drawn on the host, lengths fixed. No value-dependent
sizes. 3 phases."""

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset
from transformers import BertConfig, BertForSequenceClassification


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    torch.manual_seed(2341)
    acc = Accelerator(mixed_precision="bf16", gradient_accumulation_steps=4)
    model = BertForSequenceClassification(BertConfig(num_labels=5))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=True)
    ids = torch.randint(0, 30522, (256, 256))
    labels = torch.randint(0, 5, (256,))
    dl = DataLoader(
        TensorDataset(ids, labels),
        batch_size=32,
        num_workers=2,
        persistent_workers=True,
        prefetch_factor=4,
        pin_memory=True,
        pin_memory_device="cuda",
    )
    model, opt, dl = acc.prepare(model, opt, dl)
    print("device", acc.device, "params", sum(p.numel() for p in model.parameters()))
    report("prepared")

    model.train()
    for step, (x, y) in enumerate(dl):
        with acc.accumulate(model):
            loss = model(input_ids=x, labels=y).loss
            acc.backward(loss)
            if acc.sync_gradients:
                acc.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
        print("micro-batch", step, round(loss.item(), 4))
    del loss
    report("train accumulate bf16")

    plain = acc.unwrap_model(model)
    plain.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(4):
            logits = plain(input_ids=torch.randint(0, 30522, (128, 256), device=acc.device)).logits
            print("eval", tuple(logits.shape))
    del logits
    report("eval unwrapped no_grad")
