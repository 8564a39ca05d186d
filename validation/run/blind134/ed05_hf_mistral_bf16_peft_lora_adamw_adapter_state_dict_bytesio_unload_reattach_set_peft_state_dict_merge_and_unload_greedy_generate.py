"""A LoRA round trip with peft on a bf16 Hugging Face Mistral (MistralConfig: 1,024 wide, 8 layers,
16 heads, 4 key-value heads, MLP of 3,584, 32,000 vocabulary): LoRA of rank 16 on the attention and
MLP projections, 2 steps of AdamW (foreach) at batch 8 x 1,024; the adapter's weights taken by
`get_peft_model_state_dict` and saved by torch.save into an io.BytesIO, the optimizer dropped and
the adapters removed by `unload()`; a fresh LoRA attached to the same base, the saved adapter read
back by torch.load(map_location="cpu") and put in place by `set_peft_model_state_dict`, merged
into the base weights by `merge_and_unload()`, then greedy generation of 48 tokens for 4 prompts of
512 tokens; 5 phases."""

import io
import os

import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from transformers import MistralConfig, MistralForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13405)
B, T, P, NEW = (2, 64, 16, 4) if SMALL else (8, 1024, 512, 48)
cfg = MistralConfig(
    vocab_size=32000 if not SMALL else 512,
    hidden_size=1024 if not SMALL else 64,
    intermediate_size=3584 if not SMALL else 128,
    num_hidden_layers=8 if not SMALL else 2,
    num_attention_heads=16 if not SMALL else 4,
    num_key_value_heads=4 if not SMALL else 2,
    max_position_embeddings=T,
    sliding_window=None,
)
device = "cuda" if torch.cuda.is_available() else "cpu"
lcfg = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    task_type="CAUSAL_LM",
)

base = MistralForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
model = get_peft_model(base, lcfg)
model.train()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(2):
    x = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    loss = model(input_ids=x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
if device == "cuda":
    print(
        f"lora loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

buf = io.BytesIO()
torch.save(get_peft_model_state_dict(model), buf)
del opt, loss
base = model.unload()
del model
if device == "cuda":
    print(
        f"adapter {buf.tell()} bytes allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model = get_peft_model(base, lcfg)
buf.seek(0)
set_peft_model_state_dict(model, torch.load(buf, map_location="cpu"))
merged = model.merge_and_unload()
del model, base
merged.eval()
if device == "cuda":
    print(
        f"merged allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

prompts = torch.randint(0, cfg.vocab_size, (4, P), device=device)
with torch.inference_mode():
    out = merged.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"generated {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
