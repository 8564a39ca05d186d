"""Fine-tuning with the HF Trainer as most users do: a LlamaForCausalLM from config (1024 wide,
8 layers, 16 heads with 4 KV heads) in fp32 weights, TrainingArguments(bf16=True,
per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=2, the Trainer's default
optimizer and scheduler), a map-style dataset of random 1024-token sequences with labels = inputs;
a callback prints the memory at each step's end and resets the peak; 3 phases."""

import os
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3501)
if SMALL:
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    S = 16
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
    )
    S = 1024
config._attn_implementation = "sdpa"
cuda = torch.cuda.is_available()


class Random(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        ids = torch.randint(0, config.vocab_size, (S,))
        return {"input_ids": ids, "labels": ids.clone()}


class Memory(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        if cuda:
            print(f"model {torch.cuda.memory_allocated()}")
            torch.cuda.reset_peak_memory_stats()

    def on_step_end(self, args, state, control, **kwargs):
        if cuda:
            peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
            print(f"step {state.global_step} peak {peak} reserved {reserved}")
            torch.cuda.reset_peak_memory_stats()


model = LlamaForCausalLM(config)
args = TrainingArguments(
    output_dir=tempfile.mkdtemp(),
    per_device_train_batch_size=4 if not SMALL else 2,
    gradient_accumulation_steps=2,
    max_steps=2,
    bf16=cuda,
    use_cpu=not cuda,
    learning_rate=2e-5,
    logging_strategy="no",
    save_strategy="no",
    report_to="none",
    dataloader_num_workers=0,
)
Trainer(model=model, args=args, train_dataset=Random(), callbacks=[Memory()]).train()
