"""Two adapter types on one model with peft's PeftMixedModel (get_peft_model(..., mixed=True)): LoHa (r 8)
on the attention projections and LoKr (r 8, decompose_both) on the MLP projections of a MistralForCausalLM
from a small MistralConfig (1024 wide, 8 layers, GQA 16/4, sliding_window 256, untied), bf16 base weights
with the adapters kept in fp32, both adapters active at once (set_adapter(["loha", "lokr"])), trained
under bf16 autocast with foreach AdamW and a linear warmup on 6 x 768 batches (sdpa, sliding-window mask),
3 steps. Then the perplexity recipe of the transformers docs: one 3,072-token sequence scored with a
sliding window (max_length 1,024, stride 512, labels -100 on the overlapping context) under no_grad, and a
generate() on a left-padded batch whose KV cache is a DynamicCache(offloading=True): every layer's keys
and values go to the host after use and are prefetched back one layer ahead.

Phases: 0 model and adapters built; 1 first step; 2 two more steps; 3 strided perplexity; 4 offloaded-cache
greedy generate."""

import math
import os

import torch
from peft import LoHaConfig, LoKrConfig, get_peft_model
from transformers import DynamicCache, MistralConfig, MistralForCausalLM, get_linear_schedule_with_warmup

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3112)
if SMALL:
    config = MistralConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=16,
    )
    B, S, L, MAXLEN, STRIDE, G, PL, NEW = 2, 48, 96, 32, 16, 2, 12, 4
else:
    config = MistralConfig(
        vocab_size=32768,
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        sliding_window=256,
        max_position_embeddings=4096,
    )
    B, S, L, MAXLEN, STRIDE, G, PL, NEW = 6, 768, 3072, 1024, 512, 8, 200, 64
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


base = MistralForCausalLM(config).to(device=device, dtype=torch.bfloat16)
loha = LoHaConfig(
    r=8,
    alpha=16,
    rank_dropout=0.0,
    module_dropout=0.0,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
)
lokr = LoKrConfig(
    r=8,
    alpha=16,
    decompose_both=True,
    decompose_factor=-1,
    target_modules=["gate_proj", "up_proj", "down_proj"],
)
model = get_peft_model(base, loha, adapter_name="loha", mixed=True)
model.add_adapter("lokr", lokr)
model.set_adapter(["loha", "lokr"])
for p in model.parameters():
    if p.requires_grad and p.dtype != torch.float32:
        p.data = p.data.float()
params = [p for p in model.parameters() if p.requires_grad]
print("trainable", sum(p.numel() for p in params), "tensors", len(params))
optimizer = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.01, foreach=True)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=3)
report("built")

model.train()
lengths = torch.linspace(S // 2, S, B).long()
for step in range(3):
    ids = torch.randint(3, config.vocab_size, (B, S))
    mask = (torch.arange(S)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    labels = ids.masked_fill(mask == 0, -100)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device))
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out
    if step == 0:
        report("step0")
report("steps1-2")

model.eval()
text = torch.randint(3, config.vocab_size, (1, L)).to(device)
nlls, prev_end, ntok = [], 0, 0
with torch.no_grad():
    for begin in range(0, L, STRIDE):
        end = min(begin + MAXLEN, L)
        trg_len = end - prev_end
        input_ids = text[:, begin:end]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = model(input_ids=input_ids, labels=target_ids).loss
        n_valid = (target_ids != -100).sum().item() - 1
        nlls.append(loss * n_valid)
        ntok += n_valid
        prev_end = end
        if end == L:
            break
ppl = torch.exp(torch.stack(nlls).sum() / ntok)
print(f"strided ppl {ppl.item():.1f} (log {math.log(config.vocab_size):.2f})")
del nlls, ppl, text
report("perplexity")

prompts = torch.randint(3, config.vocab_size, (G, PL))
plen = torch.linspace(PL // 4, PL, G).long()
attn = (torch.arange(PL)[None, :] >= (PL - plen)[:, None]).long()
prompts = prompts * attn
cache = DynamicCache(config=config, offloading=True)
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    seqs = model.generate(
        input_ids=prompts.to(device),
        attention_mask=attn.to(device),
        past_key_values=cache,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=2,
    )
print("generated", tuple(seqs.shape))
report("generate")
