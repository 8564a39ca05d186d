"""Context extension the LongLoRA way on a LlamaForCausalLM from a small LlamaConfig (1536 wide, 12 layers,
12 heads of 128 with 4 KV heads, untied 32k vocabulary): YaRN rope_parameters (factor 4 over an original
4,096 positions, max_position_embeddings 16,384), peft LoRA (r 8) on q/k/v/o plus full copies of the
embeddings and every RMSNorm trained (modules_to_save), bf16 weights, non-reentrant gradient checkpointing,
and a hand-written chunked loss: the decoder's last hidden state is fed to the lm_head 1,024 positions at
a time, each chunk's fp32 cross-entropy recomputed in backward (torch.utils.checkpoint), so the full
8k x 32k logits never exist. Two micro-batches of 1 x 8,192 tokens per step, fused AdamW, 3 steps. Then
merge_and_unload and a passkey-retrieval style generate(): 2 prompts of 12,288 tokens (past the training
length), 8 greedy tokens under inference_mode (generate keeps only the last position's logits in prefill).

Phases: 0 model and adapter built; 1 first step; 2 two more steps; 3 merged; 4 long-prompt generate."""

import os

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from torch.utils.checkpoint import checkpoint
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3114)
if SMALL:
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 128,
        },
    )
    S, CHUNK, ACCUM, G, PL, NEW = 128, 32, 2, 2, 192, 4
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        head_dim=128,
        max_position_embeddings=16384,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 500000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 4096,
        },
    )
    S, CHUNK, ACCUM, G, PL, NEW = 8192, 1024, 2, 2, 12288, 8
config.tie_word_embeddings = False
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def chunk_loss(hidden, weight, labels):
    logits = F.linear(hidden, weight).float()
    return F.cross_entropy(
        logits.view(-1, logits.size(-1)), labels.reshape(-1), ignore_index=-100, reduction="sum"
    )


base = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
lora = LoraConfig(
    r=8,
    lora_alpha=16,
    lora_dropout=0.0,
    task_type="CAUSAL_LM",
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    modules_to_save=["embed_tokens", "input_layernorm", "post_attention_layernorm", "norm"],
)
model = get_peft_model(base, lora)
model.print_trainable_parameters()
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(params, lr=2e-5, weight_decay=0.0, fused=device == "cuda")
decoder = model.get_base_model().model
lm_head = model.get_base_model().lm_head
report("built")

model.train()
for step in range(3):
    for _ in range(ACCUM):
        ids = torch.randint(3, config.vocab_size, (1, S), device=device)
        labels = torch.cat([ids[:, 1:], torch.full((1, 1), -100, device=device)], 1)
        hidden = decoder(input_ids=ids, use_cache=False).last_hidden_state
        total = hidden.new_zeros((), dtype=torch.float32)
        for h, y in zip(hidden.split(CHUNK, 1), labels.split(CHUNK, 1), strict=True):
            total = total + checkpoint(chunk_loss, h, lm_head.weight, y, use_reentrant=False)
        loss = total / (S - 1)
        (loss / ACCUM).backward()
        del hidden, total
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    del loss
    if step == 0:
        report("step0")
report("steps1-2")

merged = model.merge_and_unload()
merged.gradient_checkpointing_disable()
merged.eval()
del model, optimizer, params, decoder, lm_head
report("merged")

hay = torch.randint(3, config.vocab_size, (G, PL))
hay[:, PL // 3 : PL // 3 + 6] = torch.randint(3, config.vocab_size, (G, 6))
with torch.inference_mode():
    out = merged.generate(
        input_ids=hay.to(device),
        attention_mask=torch.ones_like(hay).to(device),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=2,
    )
print("passkey answer", out[:, PL:].tolist())
report("passkey")
