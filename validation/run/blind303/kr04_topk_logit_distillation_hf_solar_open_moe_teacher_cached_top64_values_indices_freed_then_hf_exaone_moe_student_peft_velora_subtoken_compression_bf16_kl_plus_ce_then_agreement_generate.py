"""Offline top-k logit distillation (sparse knowledge distillation, as done when a teacher's full
vocabulary logits are too big to keep): a HF SolarOpenForCausalLM teacher (MoE: 16 routed experts top-4
plus a shared expert, GQA with head_dim 128) built from a small SolarOpenConfig in bf16 runs once over
the training batches under no_grad; only its top-64 logits and their token indices per position
are kept on the GPU (torch.topk), and the teacher is freed. The student, a HF ExaoneMoeForCausalLM
(first layer dense, then 8 routed experts top-2 plus a shared expert, sliding and full attention layers),
is trained through a peft LoRA adapter with the VeLoRA variant (velora_config: the adapter's saved input
activations are compressed to rank-1 sub-token projections for the backward, num_groups 32,
batch_average init) on the attention projections. The loss is the KL divergence between the
teacher's renormalized top-64 distribution and the student's log-softmax over the same 64 gathered logits
(temperature 2, scaled by T^2), plus half the ordinary cross entropy from labels; AdamW. Then a no-grad
eval of top-1 agreement with the cached teacher indices and a greedy generate() with the student.

Phases: 0 teacher built; 1 teacher top-64 pass cached, teacher freed; 2 student + VeLoRA built and the
first distillation step; 3 two more steps; 4 agreement eval and greedy generate."""

import gc
import os

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from peft.tuners.lora.config import VeloraConfig
from transformers import ExaoneMoeConfig, ExaoneMoeForCausalLM, SolarOpenConfig, SolarOpenForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3034)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    V, B, S, K, NB, NEW = 256, 2, 32, 8, 3, 6
    tcfg = SolarOpenConfig(
        vocab_size=V,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        moe_intermediate_size=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
    )
    scfg = ExaoneMoeConfig(
        vocab_size=V,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        moe_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        sliding_window=16,
    )
else:
    V, B, S, K, NB, NEW = 32000, 4, 1024, 64, 3, 32
    tcfg = SolarOpenConfig(
        vocab_size=V,
        hidden_size=1536,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=4,
        head_dim=128,
        moe_intermediate_size=768,
        n_routed_experts=16,
        num_experts_per_tok=4,
        n_shared_experts=1,
    )
    scfg = ExaoneMoeConfig(
        vocab_size=V,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=6,
        num_attention_heads=12,
        num_key_value_heads=4,
        moe_intermediate_size=512,
        num_experts=8,
        num_experts_per_tok=2,
        sliding_window=256,
    )
for c in (tcfg, scfg):
    c.pad_token_id, c.bos_token_id, c.eos_token_id = 0, 1, 2
T = 2.0


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


teacher = SolarOpenForCausalLM(tcfg).to(device=device, dtype=torch.bfloat16).eval()
report("teacher_built")

batches = []
with torch.no_grad():
    for _ in range(NB):
        ids = torch.randint(3, V, (B, S), device=device)
        logits = teacher(input_ids=ids).logits
        vals, idx = torch.topk(logits, K, dim=-1)
        batches.append((ids, vals, idx))
        del logits
del teacher
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()
report("teacher_topk")

student = ExaoneMoeForCausalLM(scfg).to(device=device, dtype=torch.bfloat16)
lcfg = LoraConfig(
    r=32,
    lora_alpha=32,
    # attention only: an MLP name would also map onto the experts' stacked parameters (lora.ParamWrapper,
    # which VeLoRA refuses)
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    velora_config=VeloraConfig(num_groups=32, scale=1.0, init_type="batch_average"),
    task_type="CAUSAL_LM",
)
model = get_peft_model(student, lcfg)
model.print_trainable_parameters()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-4)


def kd_step(ids, vals, idx):
    out = model(input_ids=ids, labels=ids)
    s_top = torch.gather(out.logits, -1, idx).float() / T
    t_logp = F.log_softmax(vals.float() / T, dim=-1)
    kd = (
        F.kl_div(
            F.log_softmax(s_top, dim=-1).flatten(0, 1),
            t_logp.flatten(0, 1),
            log_target=True,
            reduction="batchmean",
        )
        * T
        * T
    )
    loss = kd + 0.5 * out.loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return kd.item(), out.loss.item()


model.train()
print("kd step 0", kd_step(*batches[0]))
report("student_step0")
for i in (1, 2):
    print(f"kd step {i}", kd_step(*batches[i]))
report("student_steps")

model.eval()
with torch.no_grad():
    ids, vals, idx = batches[0]
    logits = model(input_ids=ids).logits
    agree = (logits.argmax(-1) == idx[..., 0]).float().mean()
    print("top1 agreement", round(agree.item(), 4))
    del logits
    prompt = ids[:, : S // 4]
    seqs = model.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
    )
print("generated", tuple(seqs.shape))
report("eval_generate")
