"""Arrow routing over a library of LoRA experts (peft's ArrowConfig / create_arrow_model, Ostapenko et
al. 2024, with general-knowledge subtraction): a Gemma3ForCausalLM from a small Gemma3TextConfig (1152
wide, 8 layers, GQA 8/2, head_dim 128, sliding window 512 on 5 of every 6 layers, tied embeddings), bf16.

Three task experts and one general adapter (LoRA r 8 on q/k/v/o and the MLP projections) are trained one
after the other on one PeftModel (add_adapter / set_adapter, fp32 adapter weights, bf16 autocast, AdamW, 3
steps each on 4 x 512 tokens) and saved with save_pretrained(selected_adapters=[...]) to a temporary
directory; the adapters are then dropped (unload) and create_arrow_model() reloads the three experts
and the general adapter onto the bare model with ArrowConfig(top_k 2, router_temperature 1, use_gks):
the general adapter's weights are subtracted from each expert (GKS), every layer's prototype is the top
right singular vector of its expert's B @ A (power iteration), and each token is routed to its top-2
experts by cosine similarity. The reloaded adapters are fp32 (peft's autocast_adapter_dtype) on the bf16
base, and the routed model runs without autocast. Then a no_grad evaluation of the routed model on 4 x 512
tokens (loss) and a greedy generate of 48 tokens for 4 left-padded prompts.

Phases: 0 model built; 1 first expert trained and saved; 2 other experts trained and saved; 3 Arrow model
built and evaluated; 4 routed greedy generate."""

import os
import tempfile

import torch
from peft import ArrowConfig, LoraConfig, create_arrow_model, get_peft_model
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3185)
if SMALL:
    config = Gemma3TextConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=16,
    )
    B, S, G, PL, NEW = 2, 32, 2, 12, 4
else:
    config = Gemma3TextConfig(
        vocab_size=32000,
        hidden_size=1152,
        intermediate_size=4608,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=128,
        sliding_window=512,
        max_position_embeddings=4096,
    )
    B, S, G, PL, NEW = 4, 512, 4, 96, 48
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 2, 1
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


base = Gemma3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
names = ["task_a", "task_b", "task_c", "general"]
model = None
report("built")

workdir = tempfile.mkdtemp(prefix="arrow_experts_")
for k, name in enumerate(names):
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets)
    if model is None:
        model = get_peft_model(base, lora, adapter_name=name)
    else:
        model.add_adapter(name, lora)
    model.set_adapter(name)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()
    optimizer = torch.optim.AdamW(params, lr=2e-4)
    model.train()
    for _step in range(3):
        ids = torch.randint(3, config.vocab_size, (B, S), device=device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    print(f"{name} loss {loss.item():.4f}")
    model.save_pretrained(workdir, selected_adapters=[name])
    del optimizer, params, loss
    if k == 0:
        report("expert0")
report("experts")

base = model.unload()
del model
for p in base.parameters():
    p.data = p.data.to(torch.bfloat16)
arrow = create_arrow_model(
    base_model=base,
    task_specific_adapter_paths=[os.path.join(workdir, n) for n in names[:3]],
    general_adapter_paths=[os.path.join(workdir, "general")],
    arrow_config=ArrowConfig(top_k=2, router_temperature=1.0, use_gks=True, rng_seed=0),
)
arrow.eval()
with torch.no_grad():
    ids = torch.randint(3, config.vocab_size, (B, S), device=device)
    loss = arrow(input_ids=ids, labels=ids).loss
print(f"arrow eval loss {loss.item():.4f}")
report("arrow-eval")

prompts = torch.randint(3, config.vocab_size, (G, PL))
plen = torch.linspace(PL // 3, PL, G).long()
attn = (torch.arange(PL)[None, :] >= (PL - plen)[:, None]).long()
prompts = prompts * attn
with torch.no_grad():
    seqs = arrow.generate(
        input_ids=prompts.to(device),
        attention_mask=attn.to(device),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=1,
    )
print("generated", tuple(seqs.shape))
report("generate")
