"""Round trip of a Hugging Face checkpoint for ModernBERT-Decoder (model_type "modernbert-decoder"): a
ModernBertDecoderForCausalLM of ModernBERT-base size (768 wide, 22 layers, alternating global and 128-token
sliding-window attention) with an untied LM head, built on the host, written with save_pretrained into a
temporary directory (safetensors), then loaded with from_pretrained(dtype=torch.bfloat16, device_map="cuda").
New tokens are added with resize_token_embeddings(pad_to_multiple_of=64, mean_resizing=True) (new rows
drawn from the old embeddings' mean and covariance, input embeddings and head both resized). Then pure bf16
training (bf16 weights and AdamW states) with gradient_checkpointing_enable(gradient_checkpointing_kwargs=
{"use_reentrant": True}) and get_scheduler("constant_with_warmup"), 3 steps of 8 x 1,024 tokens; finally
checkpointing off and greedy generation of 64 tokens for 6 prompts with output_logits.

Phases: 0 saved and loaded; 1 embeddings resized; 2 first step; 3 two more steps; 4 generation."""

import tempfile

import torch
from transformers import ModernBertDecoderConfig, ModernBertDecoderForCausalLM, get_scheduler

torch.manual_seed(3144)
device = "cuda"
config = ModernBertDecoderConfig(
    vocab_size=50368,
    hidden_size=768,
    intermediate_size=1152,
    num_hidden_layers=22,
    num_attention_heads=12,
    max_position_embeddings=8192,
    local_attention=128,
    tie_word_embeddings=False,
)
with tempfile.TemporaryDirectory() as tmp:
    ModernBertDecoderForCausalLM(config).save_pretrained(tmp)
    model = ModernBertDecoderForCausalLM.from_pretrained(
        tmp, dtype=torch.bfloat16, device_map="cuda", attn_implementation="sdpa"
    )
print(f"loaded {model.dtype} {sum(p.numel() for p in model.parameters())} parameters")
torch.cuda.reset_peak_memory_stats()

emb = model.resize_token_embeddings(config.vocab_size + 300, pad_to_multiple_of=64, mean_resizing=True)
print(f"resized input {tuple(emb.weight.shape)} head {tuple(model.get_output_embeddings().weight.shape)}")
vocab = emb.weight.shape[0]
torch.cuda.reset_peak_memory_stats()

model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
scheduler = get_scheduler("constant_with_warmup", optimizer, num_warmup_steps=2)
for step in range(3):
    ids = torch.randint(0, vocab, (8, 1024), device=device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, ids
    if step == 0:
        torch.cuda.reset_peak_memory_stats()
torch.cuda.reset_peak_memory_stats()

model.gradient_checkpointing_disable()
model.eval()
prompt = torch.randint(0, config.vocab_size, (6, 200), device=device)
out = model.generate(
    input_ids=prompt,
    attention_mask=torch.ones_like(prompt),
    max_new_tokens=64,
    min_new_tokens=64,
    do_sample=False,
    return_dict_in_generate=True,
    output_logits=True,
)
print(f"generated {tuple(out.sequences.shape)} logits {len(out.logits)} x {tuple(out.logits[0].shape)}")
torch.cuda.reset_peak_memory_stats()
