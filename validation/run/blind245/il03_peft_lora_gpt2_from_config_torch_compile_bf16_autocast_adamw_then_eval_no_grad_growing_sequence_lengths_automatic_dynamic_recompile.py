"""peft LoRA on a GPT-2 from its config, compiled: 6 layers, n_embd 768, 12 heads (SDPA), context
1024, vocabulary 50304 (nanoGPT's padded size), fp32 base weights frozen, LoRA r 16 on `c_attn`,
`c_proj` and `c_fc` (GPT-2's Conv1D, fan_in_fan_out), `torch.compile(peft_model)`, bf16 autocast,
AdamW over the adapters, batch 8 x 512, 3 steps; then `eval()` and `torch.no_grad()` scoring of
batches 4 x 128, 4 x 256, 4 x 384 and 4 x 512 (dynamo recompiles for eval, then once more at the
second length with the sequence marked dynamic: automatic dynamic shapes); then one more training
step. No value-dependent sizes. 4 phases."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(2453)
V, B, T = 50304, 8, 512


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = GPT2Config(vocab_size=V, n_positions=1024, n_embd=768, n_layer=6, n_head=12, attn_implementation="sdpa")
base = GPT2LMHeadModel(cfg).cuda()
lora = LoraConfig(
    r=16, lora_alpha=32, lora_dropout=0.05, target_modules=["c_attn", "c_proj", "c_fc"], fan_in_fan_out=True
)
model = get_peft_model(base, lora)
compiled = torch.compile(model)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
report("setup")


def train_step():
    ids = torch.randint(0, V, (B, T), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = compiled(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


model.train()
for _ in range(3):
    train_step()
report("train_lora_compiled")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for t in (128, 256, 384, 512):
        ids = torch.randint(0, V, (4, t), device="cuda")
        logits = compiled(input_ids=ids).logits
        del logits, ids
report("eval_growing_lengths")

model.train()
train_step()
report("train_again")
