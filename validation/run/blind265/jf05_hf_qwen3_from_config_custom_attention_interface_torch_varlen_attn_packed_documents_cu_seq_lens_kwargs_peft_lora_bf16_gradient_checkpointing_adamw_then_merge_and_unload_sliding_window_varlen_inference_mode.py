"""transformers 5's `AttentionInterface` with PyTorch 2.10's `torch.nn.attention.varlen.varlen_attn`, the way
people now train on packed documents without padding or flash-attn: a function registered as
"torch_varlen" takes the (1, heads, tokens, 128) query, key and value of each layer, views them as
(tokens, heads, 128) and calls `varlen_attn(q, k, v, cu_seq_lens_q, cu_seq_lens_k, max_length_q,
max_length_k, window_size=(-1, 0))` (causal within each document) with the `cu_seq_lens_*` and
`max_length_*` keyword arguments the program passes to the model's forward (transformers' flash
kwargs, forwarded to every attention call; no mask is built for an implementation the mask interface
does not know). A Qwen3 from config (16 layers of d 2,048, 16 query and 16 KV heads of 128, MLP
6,144, vocabulary 32,000, untied) in bf16 with `attn_implementation="torch_varlen"`; peft 0.21 LoRA
(r 16, alpha 32, all seven projections), non-reentrant gradient checkpointing; 8 AdamW steps, each
one row of 8,192 tokens packing documents of 64 to 2,048 tokens (lengths drawn on the host by a seeded
`random.Random`, position_ids restarting per document, the first label of each document -100); a
no_grad evaluation of 2 packed rows; then `merge_and_unload()` and 2 packed rows under
`torch.inference_mode()` with a 512-token causal sliding window (`window_size=(512, 0)`) and the
log-sum-exp requested (`return_aux=AuxRequest(lse=True)`). No value-dependent sizes. 4 phases."""

import random

import torch
from peft import LoraConfig, get_peft_model
from torch.nn.attention.varlen import AuxRequest, varlen_attn
from transformers import AttentionInterface, AutoModelForCausalLM, Qwen3Config

torch.manual_seed(2655)
WINDOW = {"size": (-1, 0), "lse": False}


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def torch_varlen_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (tokens, heads, head_dim)
    out = varlen_attn(
        q,
        k,
        v,
        kwargs["cu_seq_lens_q"],
        kwargs["cu_seq_lens_k"],
        kwargs["max_length_q"],
        kwargs["max_length_k"],
        scale=scaling,
        window_size=WINDOW["size"],
        return_aux=AuxRequest(lse=True) if WINDOW["lse"] else None,
    )
    if WINDOW["lse"]:
        out, _lse = out
    return out.unsqueeze(0), None  # (1, tokens, heads, head_dim), as the flash implementations return


AttentionInterface.register("torch_varlen", torch_varlen_attention)

cfg = Qwen3Config(
    vocab_size=32000,
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=16,
    num_attention_heads=16,
    num_key_value_heads=16,
    head_dim=128,
    max_position_embeddings=8192,
    tie_word_embeddings=False,
)
model = AutoModelForCausalLM.from_config(cfg, attn_implementation="torch_varlen", dtype=torch.bfloat16).cuda()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    task_type="CAUSAL_LM",
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4, fused=True)
report("qwen3_lora_built_bf16")

rng = random.Random(26550)
ROW = 8192


def packed_row():
    lengths, left = [], ROW
    while left > 0:
        n = min(rng.randint(64, 2048), left)
        lengths.append(n)
        left -= n
    ids = torch.randint(0, cfg.vocab_size, (1, ROW), device="cuda")
    pos = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0).cuda()
    cu = torch.tensor([0] + [sum(lengths[: i + 1]) for i in range(len(lengths))], dtype=torch.int32)
    labels = ids.clone()
    labels[0, cu[:-1].long().cuda()] = -100
    flash = {
        "cu_seq_lens_q": cu.cuda(),
        "cu_seq_lens_k": cu.cuda(),
        "max_length_q": max(lengths),
        "max_length_k": max(lengths),
    }
    return ids, pos, labels, flash


model.train()
for step in range(8):
    ids, pos, labels, flash = packed_row()
    loss = model(input_ids=ids, position_ids=pos, labels=labels, **flash).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
report("lora_packed_varlen_training")

model.eval()
with torch.no_grad():
    for _ in range(2):
        ids, pos, labels, flash = packed_row()
        print("eval", round(model(input_ids=ids, position_ids=pos, labels=labels, **flash).loss.item(), 3))
report("no_grad_eval")

del opt, loss
merged = model.merge_and_unload()
WINDOW.update(size=(512, 0), lse=True)
with torch.inference_mode():
    for _ in range(2):
        ids, pos, labels, flash = packed_row()
        logits = merged(input_ids=ids, position_ids=pos, **flash).logits
        print("next", logits[0, -1].argmax().item())
report("merged_sliding_window_inference")
