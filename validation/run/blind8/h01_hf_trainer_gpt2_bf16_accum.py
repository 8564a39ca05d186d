"""HF `Trainer` on a GPT2LMHeadModel from a GPT-2 small-sized GPT2Config (768 wide, 6 layers, 50257 vocab),
fp32 weights with `bf16=True` (autocast), batch 8 x 512 tokens, 2 gradient-accumulation micro-batches,
the Trainer's default optimizer and scheduler, gradient clipping at 1.0, 3 optimizer steps."""

import os

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

SMALL = bool(os.environ.get("SMOKE"))
LAYERS, WIDTH, VOCAB, SEQ, BATCH = (1, 64, 1000, 32, 2) if SMALL else (6, 768, 50257, 512, 8)
torch.manual_seed(801)


class RandomTokens(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        ids = torch.randint(0, VOCAB, (SEQ,))
        return {"input_ids": ids, "labels": ids.clone()}


model = GPT2LMHeadModel(GPT2Config(n_layer=LAYERS, n_embd=WIDTH, n_head=12 if not SMALL else 4, vocab_size=VOCAB))
args = TrainingArguments(
    output_dir="/tmp/vramscope_h01",
    per_device_train_batch_size=BATCH,
    gradient_accumulation_steps=2,
    max_steps=3,
    bf16=torch.cuda.is_available(),
    report_to=[],
    save_strategy="no",
    logging_steps=1,
    dataloader_num_workers=0,
    use_cpu=not torch.cuda.is_available(),
)
trainer = Trainer(model=model, args=args, train_dataset=RandomTokens())
if torch.cuda.is_available():
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
trainer.train()
if torch.cuda.is_available():
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
