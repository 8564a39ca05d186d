"""SHiRA and MiSS on a Llama decoder: a from-config Llama (6 layers, d 1024, 16 heads with 8 KV heads,
MLP 2816, vocab 32000, fp32 weights) moved to the GPU first, then wrapped with peft's SHiRA (sparse
high-rank adapter, r 16 on q/k/v/o_proj: r*(in+out) trainable entries per layer at a random mask that
`random_mask` builds on the weight's device; its forward clones the base weight and adds a
`sparse_coo_tensor` delta: peft/tuners/shira/layer.py). bf16 autocast, AdamW, batch 4 x 512, three
steps. Then a second SHiRA adapter (r 32 on gate/up/down_proj, another random mask) added and made
active, trained two steps; then eval with each adapter under no_grad. 4 phases."""

import torch
from peft import ShiraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(2502)
V, T, B = 32000, 512, 4


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = LlamaConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=6,
    num_attention_heads=16,
    num_key_value_heads=8,
    max_position_embeddings=2048,
)
model = LlamaForCausalLM(cfg).cuda()
model = get_peft_model(
    model,
    ShiraConfig(r=16, random_seed=42, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
)
model.print_trainable_parameters()
ids = torch.randint(0, V, (B, T), device="cuda")
report("setup_shira_on_gpu")

opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
model.train()
for _ in range(3):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
report("train_shira_bf16_autocast")

model.add_adapter(
    "mlp", ShiraConfig(r=32, random_seed=7, target_modules=["gate_proj", "up_proj", "down_proj"])
)
model.set_adapter("mlp")
opt2 = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
for _ in range(2):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt2.step()
    opt2.zero_grad(set_to_none=True)
    del loss
report("train_second_shira_adapter_mlp")

model.eval()
losses = []
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for name in ("default", "mlp"):
        model.set_adapter(name)
        losses.append(model(input_ids=ids, labels=ids).loss.item())
print([round(x, 3) for x in losses])
report("eval_each_adapter")
