"""Comparing two data-aware LoRA initialisations on one base model, as peft's docs show them: a Llama
from config (768 wide, 6 layers, 12 heads without grouped KV heads, MLP 2,048, vocab 32,000, sdpa)
moved to the GPU in bfloat16. `get_peft_model` with `init_lora_weights="pissa"` (r=16, alpha=16,
lora_dropout=0.0, q/k/v/o): each weight upcast to fp32 and `torch.linalg.svd(full_matrices=False)` on
the GPU, the top-16 factors become A and B, the residual is written back in bf16. Then
`add_adapter("olora", ...)` with `init_lora_weights="olora"` (r=8, lora_dropout=0.05, q/k/v/o):
`torch.linalg.qr` of each fp32 weight on the GPU, A = R[:8], B = Q[:, :8], the base updated again.
Training: `set_adapter("default")` and 3 steps of AdamW (foreach) under bf16 autocast at batch 8 x 512
(labels = inputs), then `set_adapter("olora")` and 3 steps with its own AdamW. Evaluation at batch
16 x 512 under no_grad: the loss with each adapter active and once inside `disable_adapter()`.
5 phases. No value-dependent sizes."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(2395)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


V = 32000
config = LlamaConfig(vocab_size=V, hidden_size=768, intermediate_size=2048, num_hidden_layers=6,
                     num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=2048)
config._attn_implementation = "sdpa"
base = LlamaForCausalLM(config).to("cuda", torch.bfloat16)
attn = ["q_proj", "k_proj", "v_proj", "o_proj"]
model = get_peft_model(base, LoraConfig(r=16, lora_alpha=16, init_lora_weights="pissa", lora_dropout=0.0,
                                        target_modules=attn, task_type="CAUSAL_LM"))
report("pissa_init")

model.add_adapter("olora", LoraConfig(r=8, lora_alpha=16, init_lora_weights="olora", lora_dropout=0.05,
                                      target_modules=attn, task_type="CAUSAL_LM"))
report("olora_init")

g = torch.Generator().manual_seed(2395)


def batch(n):
    return torch.randint(0, V, (n, 512), generator=g).cuda()


def train(name):
    model.set_adapter(name)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    for _ in range(3):
        ids = batch(8)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return opt


opt_pissa = train("default")
report("train_pissa")
opt_olora = train("olora")
report("train_olora")

model.eval()
ids = batch(16)
losses = {}
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for name in ("default", "olora"):
        model.set_adapter(name)
        losses[name] = model(input_ids=ids, labels=ids).loss.item()
    with model.disable_adapter():
        losses["base_residual"] = model(input_ids=ids, labels=ids).loss.item()
print(losses)
report("compare_eval")
