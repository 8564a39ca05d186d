"""Long-context extension with RoPE scaling variants, as people stretch small models today. A HF
Phi3ForCausalLM (fused qkv_proj and gate_up_proj) built from a small Phi3Config in bf16 with LongRoPE
scaling (rope_type "longrope", per-dimension short_factor and long_factor lists, partial_rotary_factor
0.75, original_max_position_embeddings 4096, max_position_embeddings 16384): the rotary embedding
switches to the long factors whenever the sequence passes 4096 positions (dynamic_rope_update).
Long-context SFT: one 8192-token sequence per step (long factors) with non-reentrant gradient
checkpointing and fused AdamW, then a step on a batch of short 2048-token rows (short factors). Then
generate() from a 4000-token prompt whose decode crosses the 4096 boundary mid-generation. Last, a
second model, a LlamaForCausalLM with dynamic NTK scaling (rope_type "dynamic", factor 4, trained
window 2048), greedily decodes a left-padded batch of 3072-token prompts: its inv_freq is recomputed
for the longer sequence.

Phases: 0 Phi3 LongRoPE model and optimizer built; 1 first 8192-token step; 2 a long and a short-batch
step; 3 generate across the 4096 boundary; 4 Phi3 freed, Llama dynamic-NTK long-prompt batch generate."""

import gc
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3033)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    H, HEADS, KV, LAYERS, FF, V = 64, 4, 2, 2, 128, 256
    ORIG, LONG, SHORT, BS, PROMPT, NEW, LP = 64, 96, 32, 2, 60, 8, 80
else:
    H, HEADS, KV, LAYERS, FF, V = 1024, 16, 4, 8, 2816, 32064
    ORIG, LONG, SHORT, BS, PROMPT, NEW, LP = 4096, 8192, 2048, 4, 4000, 160, 3072
rot = int(H // HEADS * 0.75) // 2
config = Phi3Config(
    vocab_size=V,
    hidden_size=H,
    intermediate_size=FF,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    max_position_embeddings=ORIG * 4,
    original_max_position_embeddings=ORIG,
    rope_parameters={
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.75,
        "short_factor": [1.0 + 0.05 * i for i in range(rot)],
        "long_factor": [1.0 + 1.5 * i for i in range(rot)],
    },
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    tie_word_embeddings=False,
)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = Phi3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.1, fused=device == "cuda")
report("built")


def step_on(ids):
    ids = ids.to(device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    loss = out.loss.item()
    del out
    return loss


model.train()
print("long step", step_on(torch.randint(3, V, (1, LONG))))
report("long0")
print("long step", step_on(torch.randint(3, V, (1, LONG))))
print("short step", step_on(torch.randint(3, V, (BS, SHORT))))
report("long_short")

model.eval()
model.gradient_checkpointing_disable()
prompt = torch.randint(3, V, (1, PROMPT)).to(device)
with torch.no_grad():
    seq = model.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
    )
print("phi3 generated", tuple(seq.shape))
report("phi3_generate")

del model, optimizer, seq, prompt
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()

lcfg = LlamaConfig(
    vocab_size=V,
    hidden_size=H,
    intermediate_size=FF,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    max_position_embeddings=ORIG // 2,
    rope_parameters={"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0},
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
llama = LlamaForCausalLM(lcfg).to(device=device, dtype=torch.bfloat16).eval()
plen = torch.linspace(LP // 2, LP, BS).long()
attn = (torch.arange(LP)[None, :] >= (LP - plen)[:, None]).long()
prompts = torch.randint(3, V, (BS, LP)) * attn
with torch.no_grad():
    seqs = llama.generate(
        input_ids=prompts.to(device),
        attention_mask=attn.to(device),
        max_new_tokens=NEW // 2,
        min_new_tokens=NEW // 2,
        do_sample=False,
        pad_token_id=0,
    )
print("llama dynamic generated", tuple(seqs.shape))
report("llama_dynamic_generate")
