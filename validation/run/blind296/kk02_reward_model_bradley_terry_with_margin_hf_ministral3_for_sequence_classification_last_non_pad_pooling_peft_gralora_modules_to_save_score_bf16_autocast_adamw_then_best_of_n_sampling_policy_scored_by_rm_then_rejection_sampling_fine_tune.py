"""Reward modelling and best-of-n: a Bradley-Terry reward model with a margin term, then rejection sampling.

Reward model: Ministral3ForSequenceClassification from Ministral3Config (12 layers of 1024, 16 heads,
4 key/value heads, head_dim 64, SwiGLU 3072, vocabulary 32,000, num_labels 1) in bf16, pooled at the
last non-pad token (pad id 11, right padding), tuned with peft GraLoRA (granular LoRA, r 32, k 4 blocks,
every attention and MLP projection) with the score head in modules_to_save; chosen and rejected
responses (different lengths) go through one concatenated batch of 16; the loss is
-logsigmoid(r_chosen - r_rejected - margin) under bf16 autocast, AdamW.
Policy: a Ministral3ForCausalLM of the same size in bf16; best-of-4 sampling (top_p 0.9, temperature
0.8, num_return_sequences 4) for 8 prompts, every sample scored by the reward model under
inference_mode, the best sample of each prompt kept; then two rejection-sampling fine-tuning steps of the
policy on its best samples (prompt tokens masked with -100), AdamW.
Phases: (1) builds + first reward step; (2) two more reward steps; (3) best-of-n sampling and scoring;
(4) rejection-sampling fine-tuning. 4 phases."""

import os

import torch
import torch.nn.functional as F
from peft import GraloraConfig, get_peft_model
from transformers import Ministral3Config, Ministral3ForCausalLM, Ministral3ForSequenceClassification

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(29602)
common = dict(pad_token_id=11, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
if SMALL:
    size = dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    PAIRS, PROMPT, RESP_MIN, RESP_MAX, N_PROMPTS, N_SAMPLES, NEW = 2, 16, 8, 32, 2, 2, 8
else:
    size = dict(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
    )
    PAIRS, PROMPT, RESP_MIN, RESP_MAX, N_PROMPTS, N_SAMPLES, NEW = 8, 192, 96, 384, 8, 4, 64
PAD = common["pad_token_id"]
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def tokens(n):
    t = torch.randint(12, size["vocab_size"], (n,))
    return t


def preference_batch():
    """PAIRS prompts, each with a chosen and a rejected response of random lengths; right padded."""
    seqs, margins = [], []
    for _ in range(PAIRS):
        prompt = tokens(PROMPT)
        for _ in ("chosen", "rejected"):
            n = int(torch.randint(RESP_MIN, RESP_MAX, ()).item())
            seqs.append(torch.cat([prompt, tokens(n), torch.tensor([common["eos_token_id"]])]))
        margins.append(float(torch.randint(0, 3, ()).item()))  # annotator strength 0..2
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    # chosen rows first, then rejected rows: one forward for both
    order = torch.cat([torch.arange(0, 2 * PAIRS, 2), torch.arange(1, 2 * PAIRS, 2)])
    return ids[order].to(device), mask[order].to(device), torch.tensor(margins, device=device)


rm_base = Ministral3ForSequenceClassification(Ministral3Config(num_labels=1, **common, **size))
rm_base = rm_base.to(device=device, dtype=torch.bfloat16)
rm = get_peft_model(
    rm_base,
    GraloraConfig(
        r=32,
        gralora_k=4,
        alpha=64,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        modules_to_save=["score"],
        task_type="SEQ_CLS",
    ),
)
rm.print_trainable_parameters()
policy = Ministral3ForCausalLM(Ministral3Config(**common, **size)).to(device=device, dtype=torch.bfloat16)
policy.eval()

rm_opt = torch.optim.AdamW([p for p in rm.parameters() if p.requires_grad], lr=5e-5, weight_decay=0.0)
rm.train()
for step in range(3):
    ids, mask, margin = preference_batch()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        rewards = rm(input_ids=ids, attention_mask=mask).logits.squeeze(-1).float()
    chosen, rejected = rewards[:PAIRS], rewards[PAIRS:]
    loss = -F.logsigmoid(chosen - rejected - margin).mean()
    loss.backward()
    rm_opt.step()
    rm_opt.zero_grad(set_to_none=True)
    acc = (chosen > rejected).float().mean().item()
    print(f"rm step {step} loss {loss.item():.4f} accuracy {acc:.2f}")
    if step == 0:
        report("builds and first reward step")
report("reward steps")

rm.eval()
with torch.inference_mode():
    prompts = torch.randint(12, size["vocab_size"], (N_PROMPTS, PROMPT), device=device)
    samples = policy.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=True,
        top_p=0.9,
        temperature=0.8,
        num_return_sequences=N_SAMPLES,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
    )
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        scores = rm(input_ids=samples, attention_mask=torch.ones_like(samples)).logits.squeeze(-1).float()
    scores = scores.view(N_PROMPTS, N_SAMPLES)
    best = scores.argmax(dim=1)
    best_samples = samples.view(N_PROMPTS, N_SAMPLES, -1)[torch.arange(N_PROMPTS, device=device), best]
    best_mean, all_mean = scores.max(1).values.mean().item(), scores.mean().item()
    print(f"best-of-{N_SAMPLES} mean score {best_mean:.4f} vs {all_mean:.4f}")
    del samples
report("best-of-n sampling and scoring")

best_samples = best_samples.clone()
labels = best_samples.clone()
labels[:, :PROMPT] = -100
policy.train()
pol_opt = torch.optim.AdamW(policy.parameters(), lr=1e-6, weight_decay=0.0)
for step in range(2):
    loss = policy(input_ids=best_samples, labels=labels).loss
    loss.backward()
    pol_opt.step()
    pol_opt.zero_grad(set_to_none=True)
    print(f"rft step {step} loss {loss.item():.4f}")
report("rejection-sampling fine-tuning")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
