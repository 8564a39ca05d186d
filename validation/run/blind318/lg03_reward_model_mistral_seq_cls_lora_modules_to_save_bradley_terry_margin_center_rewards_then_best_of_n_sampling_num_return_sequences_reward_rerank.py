"""Reward-model training and best-of-n reranking by hand, the way TRL's RewardTrainer does it, without TRL.

The reward model is a MistralForSequenceClassification (num_labels 1) from a small MistralConfig (1024 wide,
8 layers, GQA 16/4, sliding window 512), bf16, with a LoRA (r 16, attention and MLP projections) and the
score head trained in full through modules_to_save. Chosen and rejected responses to the same prompts are
right-padded into one batch of 2 x 8 sequences (lengths up to 768), the reward is read at each sequence's
last non-pad token (the model's own pad_token_id logic), and the loss is the Bradley-Terry loss with a
per-pair margin, -logsigmoid(r_c - r_r - margin), plus the center_rewards_coefficient term
0.01 * mean((r_c + r_r)^2); bf16 autocast, AdamW, 4 steps with gradient accumulation 2. Then best-of-n: a
separate policy (a MistralForCausalLM of the same config, bf16, eval) samples n = 4 completions per
prompt with generate(num_return_sequences=4, do_sample, top_k 50, temperature 0.8) for 6 left-padded
prompts, the reward model scores all 24 (prompt + completion, re-padded on the right) under no_grad, and
the best completion per prompt is gathered.

Phases: 0 reward model and adapter built; 1 first accumulation step; 2 three more; 3 policy built and
best-of-n sampling; 4 reward scoring and rerank."""

import os

import torch
import torch.nn.functional as F
from peft import LoraConfig, TaskType, get_peft_model
from transformers import MistralConfig, MistralForCausalLM, MistralForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3183)
if SMALL:
    config = MistralConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=32,
    )
    P, S, G, PL, NEW, N = 2, 48, 2, 12, 8, 2
else:
    config = MistralConfig(
        vocab_size=32768,
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        sliding_window=512,
        max_position_embeddings=4096,
    )
    P, S, G, PL, NEW, N = 8, 768, 6, 128, 96, 4
config.tie_word_embeddings = False
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
config.num_labels = 1
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


rm_base = MistralForSequenceClassification(config).to(device=device, dtype=torch.bfloat16)
rm = get_peft_model(
    rm_base,
    LoraConfig(
        task_type=TaskType.SEQ_CLS,
        r=16,
        lora_alpha=32,
        lora_dropout=0.05,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    ),
)
for p in rm.parameters():
    if p.requires_grad:
        p.data = p.data.float()
params = [p for p in rm.parameters() if p.requires_grad]
print("trainable", sum(p.numel() for p in params))
optimizer = torch.optim.AdamW(params, lr=1e-4)
report("built")


def right_pad(seqs):
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return ids.to(device), mask.to(device)


rm.train()
for step in range(4):
    for _micro in range(2):
        prompt_len = torch.randint(S // 8, S // 4, (P,))
        seqs = []
        for _side in range(2):
            for i in range(P):
                n = int(prompt_len[i]) + int(torch.randint(S // 4, S - int(prompt_len[i]), ()).item())
                seqs.append(torch.randint(3, config.vocab_size, (n,)))
        ids, mask = right_pad(seqs)
        margin = torch.rand(P, device=device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            rewards = rm(input_ids=ids, attention_mask=mask).logits.float().squeeze(-1)
        r_c, r_r = rewards[:P], rewards[P:]
        loss = -F.logsigmoid(r_c - r_r - margin).mean() + 0.01 * ((r_c + r_r) ** 2).mean()
        (loss / 2).backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} acc {(r_c > r_r).float().mean().item():.2f}")
    del rewards, loss, r_c, r_r
    if step == 0:
        report("step0")
report("steps1-3")

del optimizer
rm.eval()
policy = MistralForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
prompts = torch.randint(3, config.vocab_size, (G, PL))
plen = torch.linspace(PL // 3, PL, G).long()
attn = (torch.arange(PL)[None, :] >= (PL - plen)[:, None]).long()
prompts = prompts * attn
with torch.no_grad():
    samples = policy.generate(
        input_ids=prompts.to(device),
        attention_mask=attn.to(device),
        do_sample=True,
        top_k=50,
        temperature=0.8,
        num_return_sequences=N,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        pad_token_id=0,
        eos_token_id=2,
    )
print("samples", tuple(samples.shape))
report("best-of-n sample")

seqs = []
for i in range(G * N):
    keep = samples[i].cpu()
    seqs.append(keep[(PL - int(plen[i // N])) :])
ids, mask = right_pad(seqs)
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    scores = rm(input_ids=ids, attention_mask=mask).logits.float().view(G, N)
best = scores.argmax(dim=1)
chosen = samples.view(G, N, -1)[torch.arange(G, device=device), best]
print("best", best.tolist(), tuple(chosen.shape))
report("rerank")
