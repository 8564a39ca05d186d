"""A pairwise (Bradley-Terry) reward model: Hugging Face AutoModelForSequenceClassification.from_config on a
Qwen2Config (random init, nothing downloaded, num_labels 1), LoRA adapters by peft, then the merged model fully
fine-tuned.

Model: Qwen2Config(hidden 1024, intermediate 2816, 12 layers, 16 heads with 4 key/value heads, vocabulary 151,936,
pad token 151,643, SDPA attention), base weights in bf16. peft LoraConfig(task_type SEQ_CLS, r 16, alpha 32,
dropout 0.05, every q/k/v/o/gate/up/down projection, the score head in modules_to_save); peft keeps the adapters in
fp32. Gradient checkpointing (non-reentrant) on the base.

Data: random chosen and rejected answers right-padded to 512 tokens with lengths drawn once from a seeded CPU
generator (between 256 and 512), an attention mask (SDPA with a padding mask), chosen and rejected concatenated
into one batch of 2 x 8 rows; the model pools the last non-pad token (pad_token_id).

Training: loss -logsigmoid(r_chosen - r_rejected - margin) with a per-pair margin, plus 0.01 * (r_chosen +
r_rejected)^2 to centre the rewards; bf16 autocast; torch.optim.AdamW(fused=True) lr 1e-4 over the trainable
parameters; clip at 1.0. Evaluation: pairwise accuracy under torch.inference_mode at 32 pairs. Variant:
merge_and_unload(), the whole model cast to fp32, gradient checkpointing off, full fine-tuning under fp16 autocast
with torch.amp.GradScaler and torch.optim.Adam(foreach=False) lr 1e-6, 4 pairs a step.

Phases: the first LoRA step; 3 more; evaluation; the first full fp16 step; 2 more. 5 phases."""

import os

import torch
import torch.nn.functional as F
from peft import LoraConfig, TaskType, get_peft_model
from transformers import AutoModelForSequenceClassification, Qwen2Config

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2303)
if SMALL:
    cfg = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2)
    VOCAB, LEN, PAIRS = 1024, 64, 2
else:
    cfg = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12, num_attention_heads=16,
               num_key_value_heads=4)
    VOCAB, LEN, PAIRS = 151936, 512, 8
PAD = VOCAB - 293
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
lengths_gen = torch.Generator().manual_seed(7)


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


config = Qwen2Config(vocab_size=VOCAB, pad_token_id=PAD, num_labels=1, max_position_embeddings=2048,
                     attn_implementation="sdpa", **cfg)
base = AutoModelForSequenceClassification.from_config(config, dtype=torch.bfloat16).to(device)
lora = LoraConfig(task_type=TaskType.SEQ_CLS, r=16, lora_alpha=32, lora_dropout=0.05,
                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                  modules_to_save=["score"])
model = get_peft_model(base, lora)
model.print_trainable_parameters()
model.base_model.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.base_model.model.config.use_cache = False


def pairs_batch(n):
    lengths = torch.randint(LEN // 2, LEN + 1, (2 * n,), generator=lengths_gen)
    ids = torch.randint(0, PAD, (2 * n, LEN), device=device)
    mask = (torch.arange(LEN).unsqueeze(0) < lengths.unsqueeze(1)).to(device)
    ids = ids.masked_fill(~mask, PAD)
    margin = torch.rand(n, device=device)
    return ids, mask.long(), margin


def rewards(m, ids, mask, dtype):
    with torch.autocast("cuda", dtype=dtype, enabled=amp):
        return m(input_ids=ids, attention_mask=mask).logits.squeeze(-1).float()


def bt_loss(m, n, dtype):
    ids, mask, margin = pairs_batch(n)
    r = rewards(m, ids, mask, dtype)
    rc, rr = r[:n], r[n:]
    return -F.logsigmoid(rc - rr - margin).mean() + 0.01 * ((rc + rr) ** 2).mean()


trainable = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=0.0, fused=device == "cuda")


def lora_step():
    loss = bt_loss(model, PAIRS, torch.bfloat16)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"lora step 0 loss {lora_step():.4f}")
report("lora first step")
for _ in range(3):
    loss = lora_step()
print(f"lora step 3 loss {loss:.4f}")
report("lora train")

model.eval()
with torch.inference_mode():
    ids, mask, _ = pairs_batch(4 * PAIRS)
    r = rewards(model, ids, mask, torch.bfloat16)
    acc = (r[: 4 * PAIRS] > r[4 * PAIRS :]).float().mean().item()
print(f"eval accuracy {acc:.3f}")
report("eval")

del opt, trainable
merged = model.merge_and_unload()
del model, base
merged.gradient_checkpointing_disable()
merged = merged.float().train()
merged.requires_grad_(True)
if device == "cuda":
    torch.cuda.empty_cache()
opt = torch.optim.Adam(merged.parameters(), lr=1e-6, foreach=False)
scaler = torch.amp.GradScaler("cuda", enabled=amp)


def full_step():
    loss = bt_loss(merged, PAIRS // 2, torch.float16)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(merged.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    return loss.item()


print(f"full step 0 loss {full_step():.4f} scale {scaler.get_scale()}")
report("full first step")
for _ in range(2):
    loss = full_step()
print(f"full step 2 loss {loss:.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
