"""HF MambaForCausalLM on its torch path (no mamba_ssm kernels) from a small MambaConfig (768
wide, 12 layers, state 16, conv 4) in fp32: greedy generate() of 64 new tokens from a 512-token
prompt at batch 4, its cache holding each layer's conv and SSM states; 2 phases (load,
generate)."""

import os

import torch
from transformers import MambaConfig, MambaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3306)
if SMALL:
    config = MambaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, state_size=4)
    B, S, N = 2, 8, 4
else:
    config = MambaConfig(vocab_size=50280, hidden_size=768, num_hidden_layers=12, state_size=16)
    B, S, N = 4, 512, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MambaForCausalLM(config).to(device).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(0, config.vocab_size, (B, S), device=device)
with torch.no_grad():
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=N,
        min_new_tokens=N,
        do_sample=False,
        pad_token_id=0,
    )
print(tuple(out.shape))
del out
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
