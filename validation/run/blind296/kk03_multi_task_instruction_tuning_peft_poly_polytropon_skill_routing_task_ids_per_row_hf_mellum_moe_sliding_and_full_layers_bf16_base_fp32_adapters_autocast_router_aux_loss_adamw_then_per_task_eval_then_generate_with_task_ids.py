"""Multi-task instruction tuning with peft Poly (Polytropon): a bank of LoRA "skills" per projection and
a learned per-task routing over them, every row of a batch carrying its own task id.

Base: a MellumForCausalLM from MellumConfig (12 layers of 1024, 16 heads, 4 key/value heads, head_dim 64,
layers alternating sliding-window 512 and full attention, the first layer a dense SwiGLU 2816 and the
others mixture-of-experts with 16 experts of 512, top 4, router aux loss on for training; vocabulary
32,000) in bf16.
Poly: 6 tasks, 4 skills, 2 splits, r 8 on q/k/v/o projections (fp32 adapters, peft's
autocast_adapter_dtype), trained with AdamW under bf16 autocast on 8 x 1024 random tokens whose rows
draw random task ids (task_ids passed to the forward).
Phases: (1) build + first step; (2) three more steps; (3) per-task evaluation losses (each task's rows
alone, 4 x 1024, inference_mode); (4) greedy generation of 32 tokens after 128-token prompts, 12 prompts
of mixed tasks, task_ids passed to generate. 4 phases."""

import os

import torch
from peft import PolyConfig, get_peft_model
from transformers import MellumConfig, MellumForCausalLM

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(29603)
if SMALL:
    layers = 2
    cfg = MellumConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=32,
        layer_types=["sliding_attention", "full_attention"] * (layers // 2),
        mlp_layer_types=["dense"] + ["sparse"] * (layers - 1),
        output_router_logits=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    SEQ, BATCH, EVAL_B, PROMPT, NEW, GEN_B = 64, 2, 2, 16, 4, 4
else:
    layers = 12
    cfg = MellumConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        moe_intermediate_size=512,
        num_experts=16,
        num_experts_per_tok=4,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        sliding_window=512,
        layer_types=["sliding_attention", "full_attention"] * (layers // 2),
        mlp_layer_types=["dense"] + ["sparse"] * (layers - 1),
        output_router_logits=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    SEQ, BATCH, EVAL_B, PROMPT, NEW, GEN_B = 1024, 8, 4, 128, 32, 12
N_TASKS = 6
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


base = MellumForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
poly = PolyConfig(
    task_type="CAUSAL_LM",
    r=8,
    n_tasks=N_TASKS,
    n_skills=4,
    n_splits=2,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
)
model = get_peft_model(base, poly)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-4, weight_decay=0.01)

model.train()
for step in range(4):
    ids = torch.randint(3, cfg.vocab_size, (BATCH, SEQ), device=device)
    task_ids = torch.randint(0, N_TASKS, (BATCH,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        out = model(input_ids=ids, labels=ids, task_ids=task_ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f} aux {out.aux_loss.item():.4f}")
    del out
    if step == 0:
        report("build and first step")
report("multi-task steps")

model.eval()
base.config.output_router_logits = False  # the aux loss is a training term; decoding steps skip it
with torch.inference_mode():
    for task in range(N_TASKS):
        ids = torch.randint(3, cfg.vocab_size, (EVAL_B, SEQ), device=device)
        task_ids = torch.full((EVAL_B,), task, device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = model(input_ids=ids, labels=ids, task_ids=task_ids).loss
        print(f"task {task} eval loss {loss.item():.4f}")
report("per-task eval")

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    prompts = torch.randint(3, cfg.vocab_size, (GEN_B, PROMPT), device=device)
    task_ids = torch.arange(GEN_B, device=device) % N_TASKS
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        task_ids=task_ids,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
print(f"generated {tuple(gen.shape)}")
report("generate with task ids")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
