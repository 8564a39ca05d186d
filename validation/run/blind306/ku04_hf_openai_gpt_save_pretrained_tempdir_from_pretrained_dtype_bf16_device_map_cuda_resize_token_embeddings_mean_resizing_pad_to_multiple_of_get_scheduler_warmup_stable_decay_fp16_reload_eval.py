"""The "add special tokens to a checkpoint and fine-tune" recipe on a HF OpenAI GPT (OpenAIGPTLMHeadModel,
tied head, post-LN blocks, learned positions): a small model is built from its config on the CPU and
written with save_pretrained to a temporary directory (safetensors), then loaded back straight onto the
GPU with from_pretrained(tmp, dtype=torch.bfloat16, device_map="cuda"). 37 new tokens are added with
resize_token_embeddings(pad_to_multiple_of=64, mean_resizing=True) (the new rows are drawn from a
multivariate normal with the old embeddings' mean and covariance), the model is fine-tuned in pure bf16
(eager attention; OpenAI GPT has no gradient checkpointing) with AdamW under transformers.get_scheduler
("warmup_stable_decay"), saved again, and reloaded in fp16 for evaluation.

Phases: 0 saved in fp32 and reloaded in bf16 on the GPU; 1 resize_token_embeddings with mean resizing;
2 bf16 fine-tune steps; 3 save_pretrained and fp16 reload (the bf16 model
freed); 4 fp16 eval loss on held-out batches."""

import tempfile

import torch
from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel, get_scheduler

torch.manual_seed(3064)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


tmp = tempfile.TemporaryDirectory()
config = OpenAIGPTConfig(vocab_size=40478, n_positions=512, n_embd=768, n_layer=12, n_head=12)
OpenAIGPTLMHeadModel(config).save_pretrained(tmp.name)
model = OpenAIGPTLMHeadModel.from_pretrained(tmp.name, dtype=torch.bfloat16, device_map=device)
print("loaded", next(model.parameters()).dtype, next(model.parameters()).device)
report("reloaded bf16")

new_vocab = config.vocab_size + 37
emb = model.resize_token_embeddings(new_vocab, pad_to_multiple_of=64, mean_resizing=True)
print(
    "embeddings",
    tuple(emb.weight.shape),
    "tied",
    model.lm_head.weight is model.transformer.tokens_embed.weight,
)
report("resize mean_resizing")

model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
scheduler = get_scheduler(
    "warmup_stable_decay",
    optimizer=optimizer,
    num_warmup_steps=2,
    num_training_steps=10,
    scheduler_specific_kwargs={"num_decay_steps": 3},
)
B, T = 16, 512
for _step in range(10):
    ids = torch.randint(0, new_vocab, (B, T), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
print("lr", scheduler.get_last_lr())
report("bf16 fine-tune")

model.save_pretrained(tmp.name)
del model, optimizer, scheduler, emb, loss
model = OpenAIGPTLMHeadModel.from_pretrained(tmp.name, dtype=torch.float16, device_map=device).eval()
print("reloaded", model.config.vocab_size, next(model.parameters()).dtype)
report("save and fp16 reload")

losses = []
with torch.no_grad():
    for _ in range(4):
        ids = torch.randint(0, new_vocab, (32, T), device=device)
        losses.append(model(input_ids=ids, labels=ids).loss.float())
print("eval loss", torch.stack(losses).mean().item())
report("fp16 eval")
tmp.cleanup()
