"""HF LlamaForCausalLM from a small LlamaConfig (1536 wide, 10 layers, GQA 12/4, 32000 vocab) with
`attn_implementation="eager"`, fp32 weights under bf16 autocast, right-padded batches with an attention
mask and labels set to -100 on the padding, AdamW (foreach), grad clipping at 1.0, batch 6 x 1024, 3 steps."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(905)
if SMALL:
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, vocab_size=500)
    BATCH, SEQ = 2, 32
else:
    config = LlamaConfig(hidden_size=1536, intermediate_size=4096, num_hidden_layers=10, num_attention_heads=12, num_key_value_heads=4, vocab_size=32000)
    BATCH, SEQ = 6, 1024
config._attn_implementation = "eager"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device=device)
    lengths = torch.tensor([SEQ - 97 * i for i in range(BATCH)], device=device)
    mask = (torch.arange(SEQ, device=device)[None] < lengths[:, None]).long()
    labels = ids.masked_fill(mask == 0, -100)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
