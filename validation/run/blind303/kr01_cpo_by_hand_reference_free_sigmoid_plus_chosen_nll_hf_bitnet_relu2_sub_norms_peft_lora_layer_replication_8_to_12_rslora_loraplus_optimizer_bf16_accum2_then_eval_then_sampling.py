"""CPO (contrastive preference optimization, Xu et al. 2024) written by hand: reference-free, the loss
is -logsigmoid(beta * (logp_chosen - logp_rejected)) on summed token log-probs plus the NLL of the
chosen answer (behaviour-cloning term), on a HF BitNetForCausalLM (relu2 gated MLP with an
ffn_sub_norm before down_proj and an attn_sub_norm before o_proj) built from a small BitNetConfig in
bf16. peft LoRA with layer_replication [[0, 6], [2, 8]]: the 8 base layers are stacked into 12 (layers
2..5 appear twice, sharing their base weights, each copy with its own LoRA), rank-stabilized scaling
(use_rslora), r=16 on all linear projections; the optimizer is LoRA+ (peft.optimizers.
create_loraplus_optimizer over torch AdamW: lora_B at 16x the lr of lora_A). Chosen and rejected
answers share each prompt and are concatenated into one right-padded forward of 2B rows; gradient
accumulation over 2 micro-batches. Then a no-grad eval of the chosen/rejected margins and sampling
generate() through the replicated stack.

Phases: 0 model, replicated LoRA and LoRA+ optimizer built; 1 first CPO step; 2 three more steps
(2 micro-batches each); 3 no-grad preference eval; 4 top-k / top-p sampling generate."""

import os

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from peft.optimizers import create_loraplus_optimizer
from transformers import BitNetConfig, BitNetForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3031)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    config = BitNetConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    B, P, A, NEW = 2, 16, 16, 8
else:
    config = BitNetConfig(
        vocab_size=32000,
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=4,
    )
    B, P, A, NEW = 4, 192, 320, 40
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
BETA, NLL_W = 0.1, 1.0


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


base = BitNetForCausalLM(config).to(device=device, dtype=torch.bfloat16)
lcfg = LoraConfig(
    r=16,
    lora_alpha=32,
    use_rslora=True,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    layer_replication=[[0, 6], [2, 8]],
    task_type="CAUSAL_LM",
)
model = get_peft_model(base, lcfg)
model.print_trainable_parameters()
print("layers", len(model.base_model.model.model.layers))
optimizer = create_loraplus_optimizer(
    model, torch.optim.AdamW, lr=1e-4, loraplus_lr_ratio=16.0, weight_decay=0.0, betas=(0.9, 0.95)
)
report("built")


def make_pairs():
    prompt = torch.randint(3, config.vocab_size, (B, P))
    chosen = torch.randint(3, config.vocab_size, (B, A))
    rejected = torch.randint(3, config.vocab_size, (B, A))
    c_len = torch.linspace(A // 2, A, B).long()
    r_len = torch.linspace(A, A // 3, B).long()
    rows, labels = [], []
    for ans, ln in ((chosen, c_len), (rejected, r_len)):
        keep = torch.arange(A)[None, :] < ln[:, None]
        ans = ans.masked_fill(~keep, 0)
        ids = torch.cat([prompt, ans], dim=1)
        lab = torch.cat([torch.full((B, P), -100), ans.masked_fill(~keep, -100)], dim=1)
        rows.append(ids)
        labels.append(lab)
    ids = torch.cat(rows)
    labels = torch.cat(labels)
    mask = (labels != -100) | (torch.arange(P + A)[None, :] < P)
    return ids.to(device), mask.long().to(device), labels.to(device)


def seq_logps(logits, labels):
    logits = logits[:, :-1].float()
    labels = labels[:, 1:]
    keep = labels != -100
    tok = torch.gather(logits.log_softmax(-1), 2, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (tok * keep).sum(-1), keep.sum(-1)


def cpo_loss(ids, mask, labels):
    logits = model(input_ids=ids, attention_mask=mask).logits
    logps, counts = seq_logps(logits, labels)
    lc, lr = logps[:B], logps[B:]
    pref = -F.logsigmoid(BETA * (lc - lr)).mean()
    nll = -(lc / counts[:B]).mean()
    return pref + NLL_W * nll, (lc - lr).detach()


model.train()
ACCUM = 2
for step in range(4):
    for micro in range(ACCUM if step else 1):
        ids, mask, labels = make_pairs()
        loss, margin = cpo_loss(ids, mask, labels)
        (loss / ACCUM).backward()
        del loss
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} margin {margin.mean().item():.3f}")
    if step == 0:
        report("step0")
report("steps1-3")

model.eval()
with torch.no_grad():
    ids, mask, labels = make_pairs()
    logits = model(input_ids=ids, attention_mask=mask).logits
    logps, _ = seq_logps(logits, labels)
    acc = (logps[:B] > logps[B:]).float().mean()
    print("eval accuracy", round(acc.item(), 3))
    del logits
report("eval")

prompts = torch.randint(3, config.vocab_size, (B, P))
with torch.no_grad():
    seqs = model.generate(
        input_ids=prompts.to(device),
        attention_mask=torch.ones_like(prompts).to(device),
        do_sample=True,
        top_k=40,
        top_p=0.95,
        temperature=0.7,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        pad_token_id=0,
    )
print("generated", tuple(seqs.shape))
report("generate")
