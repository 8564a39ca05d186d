"""X-LoRA (peft XLoraConfig): a mixture of LoRA experts with a learned per-token, per-layer router, on a
HF YoutuForCausalLM (multi-head latent attention: q_lora_rank/kv_lora_rank compressions, interleaved
partial rope, tied embeddings) built from a small YoutuConfig in bf16. Two LoRA experts are trained
first, one SFT step each on its own data (r=16 on the query and output projections; r=8 on the MLP), saved
with save_pretrained into a temporary directory and unloaded from the base. X-LoRA then loads both
experts from disk, freezes them and trains only its classifier (depth 2, hidden 256, layerwise
scalings, softmax over experts, dropout) with AdamW for 3 steps; every X-LoRA forward first runs a
no-grad scaling pass of the base model to get the hidden states the classifier routes on. Then the
scalings log is switched on for an eval pass (enable_scalings_logging / get_latest_scalings), and
generate() runs greedily on a padded batch (X-LoRA forces use_cache=False: each new token re-runs
the whole sequence, twice).

Phases: 0 base built; 1 two LoRA experts trained, saved and unloaded; 2 X-LoRA built and its
classifier trained 3 steps; 3 eval with scalings logged; 4 greedy generate without a KV cache."""

import os
import tempfile

import torch
from peft import LoraConfig, XLoraConfig, get_peft_model
from transformers import YoutuConfig, YoutuForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3032)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    config = YoutuConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        kv_lora_rank=16,
        q_lora_rank=32,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=16,
    )
    B, S, NEW = 2, 32, 4
else:
    config = YoutuConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        kv_lora_rank=256,
        q_lora_rank=512,
        qk_rope_head_dim=32,
        qk_nope_head_dim=64,
        v_head_dim=64,
    )
    B, S, NEW = 4, 512, 12
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
config.max_position_embeddings = 4096


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def batch(lo):
    ids = torch.randint(lo, lo + config.vocab_size // 2 - 3, (B, S))
    lengths = torch.linspace(S // 2, S, B).long()
    mask = (torch.arange(S)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    labels = ids.masked_fill(mask == 0, -100)
    return ids.to(device), mask.to(device), labels.to(device)


base = YoutuForCausalLM(config).to(device=device, dtype=torch.bfloat16)
report("built")

workdir = tempfile.mkdtemp(prefix="xlora_experts_")
experts = {}
for i, (name, r, targets) in enumerate(
    [("code", 16, ["q_a_proj", "q_b_proj", "o_proj"]), ("math", 8, ["gate_proj", "up_proj", "down_proj"])]
):
    lcfg = LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.05, target_modules=targets, task_type="CAUSAL_LM")
    expert = get_peft_model(base, lcfg)
    opt = torch.optim.AdamW([p for p in expert.parameters() if p.requires_grad], lr=1e-3)
    ids, mask, labels = batch(3 + i * (config.vocab_size // 2 - 3))
    out = expert(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"expert {name} loss {out.loss.item():.4f}")
    path = os.path.join(workdir, name)
    expert.save_pretrained(path)
    experts[str(i)] = path  # X-LoRA loads the experts as adapters "0", "1", ...: its keys must match
    del out, opt
    base = expert.unload()
    del expert
report("experts")

base.config.use_cache = False
xcfg = XLoraConfig(
    task_type="CAUSAL_LM",
    hidden_size=config.hidden_size,
    adapters=experts,
    xlora_depth=2,
    xlora_size=256,
    xlora_dropout_p=0.1,
    layerwise_scalings=True,
    enable_softmax=True,
)
model = get_peft_model(base, xcfg)
model.print_trainable_parameters()
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(params, lr=5e-4, weight_decay=0.0)
model.train()
for step in range(3):
    ids, mask, labels = batch(3 + (step % 2) * (config.vocab_size // 2 - 3))
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"xlora step {step} loss {out.loss.item():.4f}")
    del out
report("xlora_train")

model.eval()
model.enable_scalings_logging()
with torch.no_grad():
    ids, mask, labels = batch(3)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    scalings = model.get_latest_scalings()
    print("eval loss", round(out.loss.item(), 4), "scalings", tuple(scalings.shape))
    del out
model.disable_scalings_logging()
model.clear_scalings_log()
report("scalings")

P = S // 4
prompts = torch.randint(3, config.vocab_size, (B, P))
plen = torch.linspace(P // 2, P, B).long()
attn = (torch.arange(P)[None, :] >= (P - plen)[:, None]).long()
prompts = prompts * attn
with torch.no_grad():
    seqs = model.generate(
        input_ids=prompts.to(device),
        attention_mask=attn.to(device),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
    )
print("generated", tuple(seqs.shape))
report("generate")
