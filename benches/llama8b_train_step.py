"""The speed benchmark of `vramscope run`: a Llama-3.1-8B-sized
LlamaForCausalLM built from its config in bf16, one AdamW training step at
batch 1, sequence 2048. A plain PyTorch script (it runs on an 80 GB GPU as is).

    bash benches/run_speed.sh
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

config = LlamaConfig(
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=131072,
    rope_theta=500000.0,
)
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = LlamaForCausalLM(config)
model.gradient_checkpointing_enable()
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
ids = torch.randint(0, config.vocab_size, (1, 2048), device="cuda")
torch.cuda.reset_peak_memory_stats()
loss = model(input_ids=ids, labels=ids).loss
loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
print(f"peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
