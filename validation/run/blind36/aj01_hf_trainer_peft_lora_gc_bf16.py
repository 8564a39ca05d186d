"""Supervised fine-tuning with LoRA as most tutorials do it: an HF LlamaForCausalLM from config
(2048 wide, 8 layers, 16 heads with 8 KV heads) in bf16, peft's LoraConfig(r=16, alpha=32,
q/k/v/o projections, dropout 0.05), the HF Trainer with gradient_checkpointing=True (the Trainer
enables input gradients for peft), bf16=True, batch 4 x 2048, max_steps=2, its default optimizer;
a callback prints the memory at each step's end and resets the peak; 3 phases."""

import os
import tempfile

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3601)
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
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
    )
    S = 2048
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


model = LlamaForCausalLM(config).to(torch.bfloat16)
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    task_type="CAUSAL_LM",
)
model = get_peft_model(model, lora)
args = TrainingArguments(
    output_dir=tempfile.mkdtemp(),
    per_device_train_batch_size=4 if not SMALL else 2,
    max_steps=2,
    bf16=cuda,
    use_cpu=not cuda,
    gradient_checkpointing=True,
    learning_rate=2e-4,
    logging_strategy="no",
    save_strategy="no",
    report_to="none",
    dataloader_num_workers=0,
)
Trainer(model=model, args=args, train_dataset=Random(), callbacks=[Memory()]).train()
