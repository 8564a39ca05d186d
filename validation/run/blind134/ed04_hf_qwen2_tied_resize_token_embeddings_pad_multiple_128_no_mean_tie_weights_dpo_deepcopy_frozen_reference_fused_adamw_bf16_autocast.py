"""DPO on a Hugging Face Qwen2 (Qwen2Config: 896 wide, 12 layers, 14 heads, 2 key-value heads, MLP
of 4,864, tied 32,000-token embedding; fp32 weights under bf16 autocast) after adding 5 chat tokens:
`resize_token_embeddings(32005, pad_to_multiple_of=128, mean_resizing=False)` on the GPU model (the
tied head follows, checked by `tie_weights()`), a frozen reference made by `copy.deepcopy` of the
resized model in eval mode, then fused AdamW over 2 steps of 4 chosen/rejected pairs of 1,024 tokens
(policy and reference log-probabilities gathered per token, the reference under no_grad), then the
policy's chosen/rejected margin under inference_mode; 5 phases."""

import copy
import os

import torch
import torch.nn.functional as F
from transformers import Qwen2Config, Qwen2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13404)
B, T = (2, 64) if SMALL else (4, 1024)
cfg = Qwen2Config(
    vocab_size=32000 if not SMALL else 512,
    hidden_size=896 if not SMALL else 64,
    intermediate_size=4864 if not SMALL else 128,
    num_hidden_layers=12 if not SMALL else 2,
    num_attention_heads=14 if not SMALL else 4,
    num_key_value_heads=2,
    max_position_embeddings=T,
    tie_word_embeddings=True,
)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

policy = Qwen2ForCausalLM(cfg).to(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

N_TOK = cfg.vocab_size + 5
policy.resize_token_embeddings(N_TOK, pad_to_multiple_of=128, mean_resizing=False)
policy.tie_weights()
V = policy.get_input_embeddings().weight.shape[0]
assert policy.lm_head.weight is policy.get_input_embeddings().weight
ref = copy.deepcopy(policy).eval().requires_grad_(False)
policy.train()
opt = torch.optim.AdamW(policy.parameters(), lr=5e-7, weight_decay=0.0, fused=device == "cuda")
if device == "cuda":
    print(
        f"resized {V} allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def seq_logps(model, ids, mask):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    logps = logits.float().log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return (logps * mask[:, 1:]).sum(-1)


def batch():
    ids = torch.randint(0, N_TOK, (2 * B, T), device=device)
    mask = torch.ones(2 * B, T, dtype=torch.long, device=device)
    mask[B // 2 : B, -T // 8 :] = 0
    return ids, mask


for step in range(2):
    ids, mask = batch()
    with torch.no_grad():
        ref_lp = seq_logps(ref, ids, mask)
    pol_lp = seq_logps(policy, ids, mask)
    margin = (pol_lp[:B] - ref_lp[:B]) - (pol_lp[B:] - ref_lp[B:])
    loss = -F.logsigmoid(0.1 * margin).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"dpo step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

policy.eval()
with torch.inference_mode():
    ids, mask = batch()
    lp = seq_logps(policy, ids, mask)
    acc = (lp[:B] > lp[B:]).float().mean()
if device == "cuda":
    print(
        f"eval acc {acc.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
