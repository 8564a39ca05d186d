"""Federated instruction tuning with LoRA (FedIT, Zhang et al. 2024) simulated on one GPU, with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set before torch is imported: a LlamaForCausalLM built
from LlamaConfig (8 layers of 1024, 16 heads, 4 key/value heads, SwiGLU 2816, vocabulary 32,000) with
bf16 base weights, wrapped by peft's get_peft_model (LoRA r 16, alpha 32, dropout 0.05 on q/k/v/o and
gate/up/down; adapters kept in fp32), non-reentrant gradient checkpointing through transformers'
gradient_checkpointing_enable.

Phase 1, FedAvg of the adapters: 2 rounds of 8 clients; each client loads the global adapter with
`set_peft_model_state_dict`, takes 2 fused AdamW steps (a new optimizer per client) at batch 8 x 512 under
bf16 autocast, and its `get_peft_model_state_dict` is cloned and kept; the server stacks and averages every
key and keeps the result as the new global adapter. Phase 2: no_grad evaluation loss of the global adapter
at batch 16 x 512. Phase 3, personalization: three clients' adapters loaded as named adapters
(add_adapter + set_peft_model_state_dict), merged by `add_weighted_adapter` with combination_type "ties"
(density 0.5) and "dare_linear" (density 0.7), each merged adapter evaluated under no_grad. Phase 4: the
TIES adapter merged into the base by merge_and_unload, the others deleted, empty_cache(), and an
inference_mode prefill of 4 x 1,024 with a KV cache followed by 16 greedy decode steps. 4 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch  # noqa: E402
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

torch.manual_seed(22506)
device = "cuda"
CLIENTS, ROUNDS, LOCAL, B, T, VOCAB = 8, 2, 2, 8, 512, 32000


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def client_batch(cid, n, t=T):
    lo = 1000 * cid
    ids = torch.randint(lo, lo + 12000, (n, t), device=device) % VOCAB
    return ids


config = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                     num_key_value_heads=4, vocab_size=VOCAB, max_position_embeddings=2048)
base = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
base.enable_input_require_grads()
lora_cfg = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
model = get_peft_model(base, lora_cfg)
model.print_trainable_parameters()

global_adapter = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
client_adapters = {}
for rnd in range(ROUNDS):
    states = []
    model.train()
    for cid in range(CLIENTS):
        set_peft_model_state_dict(model, global_adapter)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4, fused=True)
        for _ in range(LOCAL):
            ids = client_batch(cid, B)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        del opt
        sd = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
        states.append(sd)
        client_adapters[cid] = sd
    global_adapter = {k: torch.stack([s[k] for s in states]).mean(0) for k in global_adapter}
    del states
    print(f"round {rnd} last client loss {loss.item():.4f}")
set_peft_model_state_dict(model, global_adapter)
report("fedavg lora")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    ids = client_batch(0, 16)
    eval_loss = model(input_ids=ids, labels=ids).loss
print("global adapter eval loss", eval_loss.item())
report("eval")

names = []
for cid in (0, 3, 6):
    name = f"client{cid}"
    model.add_adapter(name, lora_cfg)
    set_peft_model_state_dict(model, client_adapters[cid], adapter_name=name)
    names.append(name)
del client_adapters
model.add_weighted_adapter(names, [1.0, 1.0, 1.0], "ties", combination_type="ties", density=0.5)
model.add_weighted_adapter(names, [0.4, 0.3, 0.3], "dare", combination_type="dare_linear", density=0.7)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for name in ("ties", "dare"):
        model.set_adapter(name)
        ids = client_batch(3, 16)
        print(name, "eval loss", model(input_ids=ids, labels=ids).loss.item())
report("ties and dare personalization")

model.set_adapter("ties")
for name in names + ["dare", "default"]:
    model.delete_adapter(name)
merged = model.merge_and_unload()
del model, global_adapter
torch.cuda.empty_cache()
merged.eval()
with torch.inference_mode():
    ids = client_batch(1, 4, 1024)
    out = merged(input_ids=ids, use_cache=True)
    past = out.past_key_values
    tok = out.logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(16):
        out = merged(input_ids=tok, past_key_values=past, use_cache=True)
        past = out.past_key_values
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
print("decoded", tuple(tok.shape), "max allocated", torch.cuda.max_memory_allocated())
report("merged kv cache decode")
