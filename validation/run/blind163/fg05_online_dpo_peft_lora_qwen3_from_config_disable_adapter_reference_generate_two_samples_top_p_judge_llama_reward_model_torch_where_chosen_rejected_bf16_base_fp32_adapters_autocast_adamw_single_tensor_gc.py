"""Online DPO (Guo et al. 2024, "Direct Language Model Alignment from Online AI Feedback") written by
hand after TRL's OnlineDPOTrainer, with a PEFT LoRA adapter over an HF Qwen3ForCausalLM built from
its config (1,024 wide, 12 layers, 16 heads with 8 KV heads of 128, q/k RMSNorm, 3,072 MLP, the
151,936-token vocabulary, tied embeddings) in bf16 weights; LoRA r 16, alpha 32, dropout 0.05 on
q/k/v/o/gate/up/down (peft 0.21 keeps the adapters in fp32), non-reentrant gradient checkpointing
with enable_input_require_grads, bf16 autocast, torch.optim.AdamW with foreach=False (lr 5e-5) over
the adapters. The reference is the same network with the adapter disabled (`with
model.disable_adapter():` under no_grad), as TRL does for PEFT models. The judge is a frozen HF
LlamaForSequenceClassification reward model (num_labels 1, 768 wide, 8 layers, its own 32,000
vocabulary reached by token id modulo) in bf16. Each step: 8 prompts of 96 tokens, two completions
each by `generate()` under no_grad (do_sample, temperature 0.9, top_p 0.95, num_return_sequences 2,
max_new_tokens 96, the end-of-sequence id set to None in a GenerationConfig so every completion is 96
tokens), the judge's scores of both, chosen and rejected picked per prompt by torch.where on the
score comparison (fixed shapes), then the policy's and the reference's completion log-probs of the
concatenated 16 x 192 batch (fp32 logits, log_softmax, gather under a completion mask), the sigmoid
DPO loss with beta 0.1, clip_grad_norm_ 1.0. 2 steps, each a generation-and-judging phase and a
training phase, after the models' phase; 5 phases."""

import os

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForSequenceClassification,
    Qwen3Config,
    Qwen3ForCausalLM,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16305)
if SMALL:
    config = Qwen3Config(
        vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=256, tie_word_embeddings=True,
    )  # fmt: skip
    judge_config = LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_labels=1, pad_token_id=0,
    )  # fmt: skip
    B, PROMPT, NEW, STEPS = 2, 8, 8, 2
else:
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    judge_config = LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=4,
        num_labels=1,
        pad_token_id=0,
    )
    B, PROMPT, NEW, STEPS = 8, 96, 96, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
BETA = 0.1

base = Qwen3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
base.config.use_cache = False
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
base.enable_input_require_grads()
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    task_type="CAUSAL_LM",
)
model = get_peft_model(base, lora)
judge = LlamaForSequenceClassification(judge_config).to(device=device, dtype=torch.bfloat16)
judge.requires_grad_(False).eval()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-5, foreach=False)
gen_config = GenerationConfig(
    max_new_tokens=NEW,
    do_sample=True,
    temperature=0.9,
    top_p=0.95,
    top_k=0,
    num_return_sequences=2,
    eos_token_id=None,
    pad_token_id=0,
    use_cache=True,
)


def completion_logps(m, ids, mask):
    logits = m(input_ids=ids, attention_mask=mask).logits
    logits = logits[:, PROMPT - 1 : -1].float()
    logps = torch.gather(logits.log_softmax(-1), 2, ids[:, PROMPT:].unsqueeze(-1)).squeeze(-1)
    return (logps * mask[:, PROMPT:]).sum(-1)


def mark():
    if device == "cuda":
        torch.cuda.synchronize()
        return f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    return ""


def cut():
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
cut()
for step in range(STEPS):
    prompts = torch.randint(1, config.vocab_size, (B, PROMPT), device=device)
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model.generate(
            input_ids=prompts, attention_mask=torch.ones_like(prompts), generation_config=gen_config
        )
        completions = out.view(B, 2, -1)
        judge_ids = (out % judge_config.vocab_size).clamp(min=1)
        scores = (
            judge(input_ids=judge_ids, attention_mask=torch.ones_like(judge_ids)).logits.view(B, 2).float()
        )
    first_better = (scores[:, 0] >= scores[:, 1])[:, None]
    chosen = torch.where(first_better, completions[:, 0], completions[:, 1])
    rejected = torch.where(first_better, completions[:, 1], completions[:, 0])
    ids = torch.cat([chosen, rejected], dim=0)
    mask = torch.ones_like(ids)
    print(
        f"generate {step} {tuple(out.shape)}"
        f" score gap {(scores[:, 0] - scores[:, 1]).abs().mean().item():.4f} {mark()}"
    )
    cut()

    model.train()
    with (
        torch.no_grad(),
        model.disable_adapter(),
        torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"),
    ):
        ref_logps = completion_logps(model, ids, mask)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logps = completion_logps(model, ids, mask)
    pc, pr = logps.chunk(2)
    rc, rr = ref_logps.chunk(2)
    logits = (pc - pr) - (rc - rr)
    loss = -F.logsigmoid(BETA * logits).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    optimizer.zero_grad()
    print(f"train {step} loss {loss.item():.4f} margin {(BETA * logits).mean().item():.4f} {mark()}")
    if step < STEPS - 1:
        cut()
    del out, completions, ids, mask, logps, ref_logps, loss, logits
