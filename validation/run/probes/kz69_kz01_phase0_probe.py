"""blind311/kz01's phase 0 cut into steps (session 69, helper kz): the H100 read +786,432 peak allocated and
+2,097,152 peak reserved over the twin in that phase (every later phase exact). The same Qwen3 + LoRA SFT
step, a line after each step (allocated, peak allocated, reserved, peak reserved; the peak reset after each
line), then two more forward/backward passes that each drop one thing: use_cache=False (no DynamicCache in
the training forward) and model.eval() (no LoRA dropout). With KZ_HIST=PATH the GPU run also writes its
memory history (torch.cuda.memory._record_memory_history, python stacks) to PATH.
Twin: `vramscope run --gpu h100 kz69_kz01_phase0_probe.py` prints the same lines."""

import os
import tempfile

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen3Config, Qwen3ForCausalLM

hist = os.environ.get("KZ_HIST")
if hist:
    torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")
torch.manual_seed(3111)
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
B, P, S = 4, 96, 320
config.tie_word_embeddings = False
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
tmp = tempfile.TemporaryDirectory()


def line(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def pairs(n):
    ids = torch.randint(3, config.vocab_size, (2 * n, S))
    plen = torch.linspace(P // 2, P, n).long().repeat(2)
    lens = torch.cat([torch.linspace(S * 3 // 4, S, n).long(), torch.linspace(S // 2, S - 8, n).long()])
    pos = torch.arange(S)[None, :]
    ids[:n, :P] = ids[n:, :P]
    mask = (pos < lens[:, None]).long()
    ids = ids * mask
    labels = ids.masked_fill((mask == 0) | (pos < plen[:, None]), -100)
    return ids.cuda(), mask.cuda(), labels.cuda()


base = Qwen3ForCausalLM(config).to(device="cuda", dtype=torch.bfloat16)
line("a built")
base.save_pretrained(os.path.join(tmp.name, "base"))
line("b base saved")
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
line("c peft model")
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, fused=True)
line("d optimizer")
ids, mask, labels = pairs(B)
line("e batch")
out = model(input_ids=ids, attention_mask=mask, labels=labels)
line("f forward")
out.loss.backward()
line("g backward")
optimizer.step()
line("h step")
optimizer.zero_grad(set_to_none=True)
line("i zero_grad")
model.save_pretrained(os.path.join(tmp.name, "sft"))
line("j adapter saved")
del out
line("k out freed")
out = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False)
line("l forward use_cache=False")
out.loss.backward()
line("m backward")
optimizer.zero_grad(set_to_none=True)
del out
line("n freed")
model.eval()
out = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False)
line("o forward eval")
out.loss.backward()
line("p backward")
optimizer.zero_grad(set_to_none=True)
del out
line("q freed")
if hist:
    torch.cuda.memory._dump_snapshot(hist)
    torch.cuda.memory._record_memory_history(enabled=None)
