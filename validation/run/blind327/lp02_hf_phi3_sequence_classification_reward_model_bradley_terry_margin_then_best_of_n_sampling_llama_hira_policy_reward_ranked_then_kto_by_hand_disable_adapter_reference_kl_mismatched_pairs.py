"""A reward model, best-of-n sampling and KTO written by hand. The reward model is a
Phi3ForSequenceClassification (num_labels 1, fused qkv_proj / gate_up_proj, 768 wide, 6 layers, GQA 12/4)
in fp32, trained for two steps with the Bradley-Terry pairwise loss plus a margin term on 8 chosen/rejected
pairs of 384 tokens (right-padded, the score read at the last non-pad token) under bf16 autocast with
foreach AdamW, then frozen and cast to bf16. The policy is a LlamaForCausalLM (1024 wide, 8 layers,
GQA 16/4) in bf16 with peft HiRA adapters (Hadamard high-rank, r 32, attention projections, fp32): it samples
4 completions for each of 8 prompts (generate with num_return_sequences, top-k 50, temperature 0.9, fixed
length), the reward model scores all 32, and the top half of each group is labelled desirable. Two KTO steps
follow: policy log-probabilities of the completions with the adapters on, reference log-probabilities with
model.disable_adapter() under no_grad, the KL baseline from mismatched prompt/completion pairs, bf16
autocast, AdamW.

Phases: 0 both models built; 1 reward-model training; 2 best-of-n sampling and scoring; 3 two KTO steps."""

import os

import torch
import torch.nn.functional as F
from peft import HiraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3272)
if SMALL:
    rm_cfg = Phi3Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_labels=1,
    )
    pol_cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    NP, RS, NPROMPT, K, PL, NEW = 2, 24, 2, 4, 8, 6
else:
    rm_cfg = Phi3Config(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=6,
        num_attention_heads=12,
        num_key_value_heads=4,
        num_labels=1,
        max_position_embeddings=2048,
    )
    pol_cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=2048,
    )
    NP, RS, NPROMPT, K, PL, NEW = 8, 384, 8, 4, 128, 96
for cfg in (rm_cfg, pol_cfg):
    cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id = 0, 1, 2
    cfg.tie_word_embeddings = False
    cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
BETA, LAM_D, LAM_U = 0.1, 1.0, 1.0


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


reward_model = Phi3ForSequenceClassification(rm_cfg).to(device)
policy = LlamaForCausalLM(pol_cfg).to(device=device, dtype=torch.bfloat16)
policy = get_peft_model(
    policy, HiraConfig(r=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], hira_dropout=0.0)
)
for p in policy.parameters():
    if p.requires_grad:
        p.data = p.data.float()
policy.print_trainable_parameters()
report("built")

rm_opt = torch.optim.AdamW(reward_model.parameters(), lr=1e-5, foreach=True)
reward_model.train()
for step in range(2):
    lengths = torch.randint(RS // 2, RS + 1, (2 * NP,))
    ids = torch.randint(3, rm_cfg.vocab_size, (2 * NP, RS))
    mask = (torch.arange(RS)[None, :] < lengths[:, None]).long()
    ids = (ids * mask).to(device)
    margin = torch.rand(NP, device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        scores = reward_model(input_ids=ids, attention_mask=mask.to(device)).logits.squeeze(-1).float()
    chosen, rejected = scores[:NP], scores[NP:]
    loss = -F.logsigmoid(chosen - rejected - margin).mean() + 0.01 * (chosen + rejected).pow(2).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(reward_model.parameters(), 1.0)
    rm_opt.step()
    rm_opt.zero_grad(set_to_none=True)
    print(f"rm step {step} loss {loss.item():.4f}")
del rm_opt, scores, chosen, rejected, loss
reward_model.eval().requires_grad_(False).to(torch.bfloat16)
report("reward_model")

prompts = torch.randint(3, pol_cfg.vocab_size, (NPROMPT, PL)).to(device)
policy.eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    seqs = policy.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=True,
        top_k=50,
        temperature=0.9,
        num_return_sequences=K,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        pad_token_id=0,
        eos_token_id=2,
    )
    rewards = torch.cat([reward_model(input_ids=chunk).logits.squeeze(-1).float() for chunk in seqs.split(8)])
order = rewards.view(NPROMPT, K).argsort(dim=1, descending=True)
desirable = torch.zeros(NPROMPT, K, dtype=torch.bool, device=device)
desirable.scatter_(1, order[:, : K // 2], True)
desirable = desirable.view(-1)
print("seqs", tuple(seqs.shape), "reward mean", f"{rewards.mean().item():.3f}")
report("best_of_n")


def completion_logps(model, ids):
    logits = model(input_ids=ids).logits[:, PL - 1 : -1].float()
    logp = torch.gather(logits.log_softmax(-1), 2, ids[:, PL:, None]).squeeze(-1)
    return logp.sum(-1)


mismatched = torch.cat([seqs[:, :PL], seqs[:, PL:].roll(1, dims=0)], dim=1)
opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=5e-5)
policy.train()
for step in range(2):
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        pol_logps = completion_logps(policy, seqs)
        with torch.no_grad():
            with policy.disable_adapter():
                ref_logps = completion_logps(policy, seqs)
                ref_kl = completion_logps(policy, mismatched)
            pol_kl = completion_logps(policy, mismatched)
    kl = (pol_kl - ref_kl).mean().clamp(min=0)
    ratio = pol_logps - ref_logps
    losses = torch.where(
        desirable,
        LAM_D * (1 - torch.sigmoid(BETA * (ratio - kl))),
        LAM_U * (1 - torch.sigmoid(BETA * (kl - ratio))),
    )
    loss = losses.mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"kto step {step} loss {loss.item():.4f} kl {kl.item():.4f}")
    del pol_logps, ref_logps, ref_kl, pol_kl, losses, loss
report("kto")
