"""LoRA-GA on a Qwen3ForCausalLM from a small Qwen3Config (1024 wide, 8 layers, GQA 16/8, head_dim 64,
qk-norm, untied 32k vocab), bf16 weights: peft's preprocess_loraga runs a user train_step (two 4 x 512
micro-batches, forward + backward with labels) to estimate each target Linear's weight gradient, then
get_peft_model with init_lora_weights="lora_ga" (r 16, LoraGAConfig ArB2r/stable) takes an SVD of every
estimated gradient to initialise A and B and offsets the base weight. The adapters are trained in fp32 under
bf16 autocast with fused AdamW on packed sequences: documents of varying length packed into 2 rows of 2,048
tokens with position_ids restarting at every document and no attention_mask (transformers turns the
position_ids into a block-causal sdpa mask), labels -100 on each document's first token. Then the adapters
are merged (merge_and_unload) and a left-padded batch is decoded greedily with cache_implementation="static"
(disable_compile=True, or the static cache would compile the decoding forward).

Phases: 0 model built and LoRA-GA initialised; 1 first packed step; 2 two more packed steps; 3 merge and
static-cache generate."""

import os

import torch
from peft import LoraConfig, get_peft_model
from peft.tuners.lora import LoraGAConfig
from peft.tuners.lora.loraga import preprocess_loraga
from transformers import Qwen3Config, Qwen3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3271)
if SMALL:
    config = Qwen3Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    MB, MS, ROWS, PACK, G, PL, NEW = 2, 32, 2, 96, 2, 12, 4
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
    MB, MS, ROWS, PACK, G, PL, NEW = 4, 512, 2, 2048, 6, 160, 48
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


model = Qwen3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
lora_config = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.0,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    init_lora_weights="lora_ga",
    lora_ga_config=LoraGAConfig(direction="ArB2r", scale="stable", stable_gamma=16),
)
calib = [torch.randint(3, config.vocab_size, (MB, MS)) for _ in range(2)]


def train_step():
    for ids in calib:
        ids = ids.to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()


preprocess_loraga(model, lora_config, train_step)
model = get_peft_model(model, lora_config)
for p in model.parameters():
    if p.requires_grad:
        p.data = p.data.float()
params = [p for p in model.parameters() if p.requires_grad]
print("trainable", sum(p.numel() for p in params), "tensors", len(params))
optimizer = torch.optim.AdamW(params, lr=2e-4, weight_decay=0.0, fused=device == "cuda")
report("loraga_init")


def packed_batch(gen):
    ids = torch.empty(ROWS, PACK, dtype=torch.long)
    pos = torch.empty(ROWS, PACK, dtype=torch.long)
    labels = torch.empty(ROWS, PACK, dtype=torch.long)
    for r in range(ROWS):
        at = 0
        while at < PACK:
            n = min(int(torch.randint(PACK // 16, PACK // 3, (1,), generator=gen)), PACK - at)
            ids[r, at : at + n] = torch.randint(3, config.vocab_size, (n,), generator=gen)
            pos[r, at : at + n] = torch.arange(n)
            labels[r, at : at + n] = ids[r, at : at + n]
            labels[r, at] = -100
            at += n
    return ids, pos, labels


gen = torch.Generator().manual_seed(11)
model.train()
for step in range(3):
    ids, pos, labels = packed_batch(gen)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=ids.to(device), position_ids=pos.to(device), labels=labels.to(device))
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} docs {int((pos == 0).sum())} loss {out.loss.item():.4f}")
    del out
    if step == 0:
        report("packed_step0")
report("packed_steps1-2")

del optimizer, params
merged = model.merge_and_unload()
merged.eval()
prompts = torch.randint(3, config.vocab_size, (G, PL))
plen = torch.linspace(PL // 3, PL, G).long()
attn = (torch.arange(PL)[None, :] >= (PL - plen)[:, None]).long()
prompts = prompts * attn
with torch.no_grad():
    seqs = merged.generate(
        input_ids=prompts.to(device),
        attention_mask=attn.to(device),
        cache_implementation="static",
        disable_compile=True,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=2,
    )
print("generated", tuple(seqs.shape))
report("merged_static_generate")
