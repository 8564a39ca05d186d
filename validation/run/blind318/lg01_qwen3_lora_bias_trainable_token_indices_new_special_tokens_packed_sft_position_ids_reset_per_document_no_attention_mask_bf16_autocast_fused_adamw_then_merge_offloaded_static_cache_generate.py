"""LoRA with a trainable bias (peft lora_bias=True: lora_B gets a bias) on the four attention projections of a
Qwen3ForCausalLM from a small Qwen3Config (1024 wide, 8 layers, GQA 16/8, q/k norms, attention_bias,
untied), plus peft's trainable_token_indices: only the embedding rows of ten "new special tokens" (ids
31990-31999) are trained, through a TrainableTokensWrapper around embed_tokens holding a delta for those
rows. bf16 base, fp32 adapters. Supervised fine-tuning on packed sequences in the packing-without-padding
style of the HF blog post: documents of uneven length, each opened by one of the special tokens, are
concatenated into 2,048-token rows, position_ids restart at 0 at each document and no attention_mask is
passed (transformers derives the block-causal sdpa mask from the position_ids), labels -100 on each
document's first token; bf16 autocast, fused AdamW, cosine schedule with warmup, 4 steps. Finally the
adapter is merged (merge_and_unload), cast back to bf16, and a left-padded batch of prompts is completed
greedily with cache_implementation="offloaded_static": a StaticCache whose layers live on the host and are
copied to the GPU one layer ahead on a side stream (disable_compile=True: no automatic torch.compile of the
decode step).

Phases: 0 model and adapter built; 1 first packed step; 2 three more steps; 3 merge and offloaded-static
greedy generate."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen3Config, Qwen3ForCausalLM, get_cosine_schedule_with_warmup

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3181)
if SMALL:
    config = Qwen3Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    R, ROW, NROWS, G, PL, NEW = 4, 96, 2, 2, 12, 4
    NEW_TOKENS = [250, 251, 252]
else:
    config = Qwen3Config(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=64,
        max_position_embeddings=4096,
    )
    R, ROW, NROWS, G, PL, NEW = 16, 2048, 4, 6, 96, 48
    NEW_TOKENS = list(range(31990, 32000))
config.tie_word_embeddings = False
config.attention_bias = True
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


base = Qwen3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
lora = LoraConfig(
    r=R,
    lora_alpha=2 * R,
    lora_dropout=0.0,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    lora_bias=True,
    trainable_token_indices={"embed_tokens": NEW_TOKENS},
)
model = get_peft_model(base, lora)
for p in model.parameters():
    if p.requires_grad:
        p.data = p.data.float()
params = [p for p in model.parameters() if p.requires_grad]
print("trainable", sum(p.numel() for p in params))
optimizer = torch.optim.AdamW(params, lr=2e-4, weight_decay=0.0, fused=device == "cuda")
scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=1, num_training_steps=4)
report("built")


def packed_batch():
    rows_ids, rows_pos, rows_lab = [], [], []
    for _ in range(NROWS):
        ids, pos, lab, used = [], [], [], 0
        while used < ROW:
            n = min(int(torch.randint(ROW // 16, ROW // 3, ()).item()), ROW - used)
            doc = torch.randint(3, config.vocab_size, (n,))
            doc[0] = NEW_TOKENS[int(torch.randint(len(NEW_TOKENS), ()).item())]
            ids.append(doc)
            pos.append(torch.arange(n))
            lab_doc = doc.clone()
            lab_doc[0] = -100
            lab.append(lab_doc)
            used += n
        rows_ids.append(torch.cat(ids))
        rows_pos.append(torch.cat(pos))
        rows_lab.append(torch.cat(lab))
    return torch.stack(rows_ids), torch.stack(rows_pos), torch.stack(rows_lab)


model.train()
for step in range(4):
    ids, pos, lab = packed_batch()
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=ids.to(device), position_ids=pos.to(device), labels=lab.to(device))
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out
    if step == 0:
        report("step0")
report("steps1-3")

del optimizer, scheduler, params
merged = model.merge_and_unload()
for p in merged.parameters():
    p.data = p.data.to(torch.bfloat16)
merged.eval()
prompts = torch.randint(3, config.vocab_size, (G, PL))
plen = torch.linspace(PL // 3, PL, G).long()
attn = (torch.arange(PL)[None, :] >= (PL - plen)[:, None]).long()
prompts = prompts * attn
with torch.no_grad():
    seqs = merged.generate(
        input_ids=prompts.to(device),
        attention_mask=attn.to(device),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        cache_implementation="offloaded_static",
        disable_compile=True,
        pad_token_id=0,
        eos_token_id=2,
    )
print("generated", tuple(seqs.shape))
report("generate")
