"""Soft prompts on a frozen bf16 Hugging Face Qwen2 (Qwen2Config: 1,024 wide, 12 layers, 16 heads, 4
key-value heads, MLP of 2,816, 32,000 vocabulary, tied embeddings) with the base's
gradient_checkpointing_enable (non-reentrant): prompt tuning (32 random virtual tokens, the prompt
embedding in fp32) trained 3 steps by torch.optim.Adafactor at batch 8 x 1,024 with the prompt's
positions masked out of the labels by peft; that peft model dropped, then p-tuning on the same base
(20 virtual tokens through the MLP PromptEncoder of hidden 1,024) trained 3 steps by AdamW
(foreach); then greedy generation of 32 tokens for 4 left-padded prompts of 384 tokens through
peft's generate (the virtual tokens prepended to the embeddings); 4 phases."""

import os

import torch
from peft import PromptEncoderConfig, PromptTuningConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13703)
B, T, P, NEW = (2, 64, 16, 4) if SMALL else (8, 1024, 384, 32)
cfg = Qwen2Config(
    vocab_size=32000 if not SMALL else 512,
    hidden_size=1024 if not SMALL else 64,
    intermediate_size=2816 if not SMALL else 128,
    num_hidden_layers=12 if not SMALL else 2,
    num_attention_heads=16 if not SMALL else 4,
    num_key_value_heads=4 if not SMALL else 2,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
    pad_token_id=0,
)
device = "cuda" if torch.cuda.is_available() else "cpu"
base = Qwen2ForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch():
    x = torch.randint(1, cfg.vocab_size, (B, T), device=device)
    mask = torch.ones(B, T, dtype=torch.long, device=device)
    mask[0, : T // 8] = 0
    labels = x.masked_fill(mask == 0, -100)
    return x, mask, labels


model = get_peft_model(
    base, PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=32, prompt_tuning_init="RANDOM")
)
model.train()
opt = torch.optim.Adafactor([p for p in model.parameters() if p.requires_grad], lr=3e-2)
for _ in range(3):
    x, mask, labels = batch()
    loss = model(input_ids=x, attention_mask=mask, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
if device == "cuda":
    print(
        f"prompt tuning loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del model, opt, loss
model = get_peft_model(
    base,
    PromptEncoderConfig(
        task_type="CAUSAL_LM",
        num_virtual_tokens=20,
        encoder_hidden_size=1024 if not SMALL else 64,
        encoder_reparameterization_type="MLP",
    ),
)
model.train()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, foreach=True)
for _ in range(3):
    x, mask, labels = batch()
    loss = model(input_ids=x, attention_mask=mask, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
if device == "cuda":
    print(
        f"p-tuning loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del opt, loss, x, mask, labels
model.eval()
prompt = torch.randint(1, cfg.vocab_size, (4, P), device=device)
pmask = torch.ones(4, P, dtype=torch.long, device=device)
prompt[1, : P // 4] = 0
pmask[1, : P // 4] = 0
with torch.no_grad():
    out = model.generate(input_ids=prompt, attention_mask=pmask, max_new_tokens=NEW, do_sample=False)
if device == "cuda":
    print(
        f"generated {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
