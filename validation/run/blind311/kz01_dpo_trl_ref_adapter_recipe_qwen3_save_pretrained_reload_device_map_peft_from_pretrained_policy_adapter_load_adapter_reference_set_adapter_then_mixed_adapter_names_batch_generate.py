"""DPO with TRL's "reference adapter" recipe on a Qwen3ForCausalLM from a small Qwen3Config (q/k RMSNorm,
1024 wide, 8 layers, GQA 16/4): the bf16 base is written with save_pretrained to a temporary directory,
a LoRA SFT adapter (r 16 with rank_pattern/alpha_pattern giving the MLP down projection r 32) is trained
one step and saved; then the base is loaded back with from_pretrained(dtype=bfloat16, device_map="cuda"),
the SFT adapter is loaded twice -- PeftModel.from_pretrained(adapter_name="policy", is_trainable=True) and
model.load_adapter(adapter_name="reference") -- and DPO (sigmoid loss, beta 0.1) runs on concatenated
chosen/rejected pairs, the reference log-probs computed under set_adapter("reference") + no_grad and the
policy's under set_adapter("policy"), with non-reentrant gradient checkpointing and fused AdamW. Last, one
left-padded batch is decoded greedily with per-row adapters (peft's mixed-adapter batch inference:
adapter_names = "policy" / "reference" / "__base__").

Phases: 0 base saved and SFT step; 1 base reloaded with both adapters; 2 first DPO step; 3 two more DPO
steps; 4 mixed-adapter greedy generate."""

import gc
import os
import tempfile

import torch
import torch.nn.functional as F
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3111)
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
    B, P, S, NEW = 2, 8, 32, 4
else:
    config = Qwen3Config(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=2048,
    )
    B, P, S, NEW = 4, 96, 320, 40
config.tie_word_embeddings = False
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
tmp = tempfile.TemporaryDirectory()
base_dir, sft_dir = os.path.join(tmp.name, "base"), os.path.join(tmp.name, "sft")


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def pairs(n):
    """n (prompt + chosen, prompt + rejected) pairs, right padded to S, labels -100 on prompt and pad."""
    ids = torch.randint(3, config.vocab_size, (2 * n, S))
    plen = torch.linspace(P // 2, P, n).long().repeat(2)
    lens = torch.cat([torch.linspace(S * 3 // 4, S, n).long(), torch.linspace(S // 2, S - 8, n).long()])
    pos = torch.arange(S)[None, :]
    ids[:n, :P] = ids[n:, :P]  # shared prompts
    mask = (pos < lens[:, None]).long()
    ids = ids * mask
    labels = ids.masked_fill((mask == 0) | (pos < plen[:, None]), -100)
    return ids.to(device), mask.to(device), labels.to(device)


def seq_logps(logits, labels):
    labels = labels[:, 1:]
    logits = logits[:, :-1].float()
    keep = labels != -100
    tok = torch.gather(logits.log_softmax(-1), 2, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (tok * keep).sum(-1)


base = Qwen3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
base.save_pretrained(base_dir)
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    task_type="CAUSAL_LM",
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    rank_pattern={"down_proj": 32},
    alpha_pattern={"down_proj": 64},
)
model = get_peft_model(base, lora)
optimizer = torch.optim.AdamW(
    [p for p in model.parameters() if p.requires_grad], lr=1e-4, fused=device == "cuda"
)
ids, mask, labels = pairs(B)
out = model(input_ids=ids, attention_mask=mask, labels=labels)
out.loss.backward()
optimizer.step()
optimizer.zero_grad(set_to_none=True)
print(f"sft loss {out.loss.item():.4f}")
model.save_pretrained(sft_dir)
del out, model, base, optimizer
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()
report("sft")

base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.bfloat16, device_map=device)
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
base.enable_input_require_grads()
model = PeftModel.from_pretrained(base, sft_dir, adapter_name="policy", is_trainable=True)
model.load_adapter(sft_dir, adapter_name="reference")
model.set_adapter("policy")
params = [p for n, p in model.named_parameters() if p.requires_grad]
print("trainable", sum(p.numel() for p in params), "tensors", len(params))
optimizer = torch.optim.AdamW(params, lr=5e-6, weight_decay=0.0, fused=device == "cuda")
report("reloaded")

beta = 0.1
model.train()
for step in range(3):
    ids, mask, labels = pairs(B)
    with torch.no_grad():
        model.set_adapter("reference")
        ref = seq_logps(model(input_ids=ids, attention_mask=mask).logits, labels)
        model.set_adapter("policy")
    pol = seq_logps(model(input_ids=ids, attention_mask=mask).logits, labels)
    logits = beta * ((pol[:B] - pol[B:]) - (ref[:B] - ref[B:]))
    loss = -F.logsigmoid(logits).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    acc = (logits > 0).float().mean()
    print(f"dpo step {step} loss {loss.item():.4f} reward acc {acc.item():.2f}")
    del pol, ref, logits, loss
    if step == 0:
        report("dpo0")
report("dpo1-2")

model.eval()
n = 2 * B
prompts = torch.randint(3, config.vocab_size, (n, P))
plen = torch.linspace(P // 3, P, n).long()
attn = (torch.arange(P)[None, :] >= (P - plen)[:, None]).long()
prompts = prompts * attn
names = ["policy"] * (n // 2) + ["reference"] * (n // 4) + ["__base__"] * (n - n // 2 - n // 4)
with torch.inference_mode():
    seqs = model.generate(
        input_ids=prompts.to(device),
        attention_mask=attn.to(device),
        adapter_names=names,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=2,
    )
print("generated", tuple(seqs.shape))
report("generate")
