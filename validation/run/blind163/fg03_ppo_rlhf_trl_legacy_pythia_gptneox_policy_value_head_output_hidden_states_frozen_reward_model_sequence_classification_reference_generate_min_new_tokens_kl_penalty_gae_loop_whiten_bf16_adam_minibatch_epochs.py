"""PPO for RLHF (Ziegler et al. 2019; InstructGPT) written by hand after TRL's legacy PPOTrainer with
AutoModelForCausalLMWithValueHead, over HF GPT-NeoX models built from Pythia-160m's config (768 wide,
12 layers, 12 heads, rotary over a quarter of each head, 3,072 MLP, a 50,304-token vocabulary, untied
embeddings), all in bf16 weights: the policy is a GPTNeoXForCausalLM wrapped with a value head
(Dropout 0.1 + Linear(768, 1)) read from `output_hidden_states=True`'s last hidden state; the frozen
reference is a second GPTNeoXForCausalLM with the policy's weights; the frozen reward model is a
GPTNeoXForSequenceClassification (num_labels 1, pad id 0, its score at the last non-pad token).
torch.optim.Adam with foreach (lr 1.41e-5, eps 1e-5) over the policy and the value head. A rollout:
32 queries of 64 tokens, `generate()` under no_grad with do_sample, top_k 0, top_p 1.0 and
min_new_tokens = max_new_tokens = 64 (the end of sequence is suppressed, so every response is 64
tokens); old log-probs and values from the policy, the reference's log-probs and the reward model's
scores under no_grad; per-token rewards -0.2 * KL with the score added at the last token; GAE
(gamma 1, lambda 0.95) by the reversed Python loop over the 64 response positions; whitened
advantages. PPO: 2 epochs over 4 shuffled mini-batches of 8 (torch.randperm), the clipped ratio
loss (0.2) and the clipped value loss (0.2, coefficient 0.1), clip_grad_norm_ 1.0 each. Phases: the
models, the rollout, PPO epoch 0, PPO epoch 1, then an evaluation rollout (greedy, 48 new tokens)
scored by the reward model under inference_mode; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, GPTNeoXForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16303)
if SMALL:
    kw = dict(
        vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    B, QUERY, RESP, MB, EVAL_NEW = 4, 8, 8, 2, 6
else:
    kw = dict(
        vocab_size=50304,
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
    )
    B, QUERY, RESP, MB, EVAL_NEW = 32, 64, 64, 8, 48
common = dict(
    rotary_pct=0.25,
    max_position_embeddings=2048,
    use_parallel_residual=True,
    tie_word_embeddings=False,
    bos_token_id=0,
    eos_token_id=0,
    pad_token_id=0,
)
config = GPTNeoXConfig(**kw, **common)
device = "cuda" if torch.cuda.is_available() else "cpu"
KL_COEF, GAMMA, LAM, CLIPRANGE, CLIPRANGE_VALUE, VF_COEF, PPO_EPOCHS = 0.2, 1.0, 0.95, 0.2, 0.2, 0.1, 2


class ValueHead(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dropout = nn.Dropout(0.1)
        self.summary = nn.Linear(hidden, 1)

    def forward(self, hidden_states):
        output = self.dropout(hidden_states)
        if output.dtype != self.summary.weight.dtype:
            output = output.to(self.summary.weight.dtype)
        return self.summary(output)


class CausalLMWithValueHead(nn.Module):
    def __init__(self, pretrained_model):
        super().__init__()
        self.pretrained_model = pretrained_model
        self.v_head = ValueHead(pretrained_model.config.hidden_size)

    def forward(self, input_ids, attention_mask=None):
        out = self.pretrained_model(
            input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True
        )
        last_hidden_state = out.hidden_states[-1]
        lm_logits = out.logits
        if lm_logits.dtype != torch.float32:
            lm_logits = lm_logits.float()
        value = self.v_head(last_hidden_state).squeeze(-1)
        return lm_logits, value

    def generate(self, *args, **kwargs):
        return self.pretrained_model.generate(*args, **kwargs)


model = CausalLMWithValueHead(GPTNeoXForCausalLM(config)).to(device=device, dtype=torch.bfloat16)
ref_model = GPTNeoXForCausalLM(config).to(device=device, dtype=torch.bfloat16)
ref_model.load_state_dict(model.pretrained_model.state_dict())
ref_model.requires_grad_(False).eval()
reward_model = GPTNeoXForSequenceClassification(GPTNeoXConfig(**kw, **common, num_labels=1))
reward_model = reward_model.to(device=device, dtype=torch.bfloat16).requires_grad_(False).eval()
optimizer = torch.optim.Adam(model.parameters(), lr=1.41e-5, eps=1e-5, foreach=True)


def logprobs_from_logits(logits, labels):
    logp = F.log_softmax(logits, dim=2)
    return torch.gather(logp, 2, labels.unsqueeze(2)).squeeze(-1)


def whiten(values, shift_mean=True):
    mean, var = torch.mean(values), torch.var(values)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened += mean
    return whitened


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

# rollout
queries = torch.randint(1, config.vocab_size, (B, QUERY), device=device)
model.eval()
with torch.no_grad():
    sequences = model.generate(
        queries,
        attention_mask=torch.ones_like(queries),
        do_sample=True,
        top_k=0,
        top_p=1.0,
        max_new_tokens=RESP,
        min_new_tokens=RESP,
        pad_token_id=0,
    )
    attention_mask = torch.ones_like(sequences)
    logits, values = model(sequences, attention_mask)
    old_logprobs = logprobs_from_logits(logits[:, :-1, :], sequences[:, 1:])[:, -RESP:]
    values = values[:, -RESP - 1 : -1].float()
    ref_logits = ref_model(input_ids=sequences, attention_mask=attention_mask).logits.float()
    ref_logprobs = logprobs_from_logits(ref_logits[:, :-1, :], sequences[:, 1:])[:, -RESP:]
    scores = reward_model(input_ids=sequences, attention_mask=attention_mask).logits[:, 0].float()
    del logits, ref_logits
    kl = old_logprobs - ref_logprobs
    rewards = -KL_COEF * kl
    rewards[:, -1] += scores
    lastgaelam = 0
    advantages_reversed = []
    for t in reversed(range(RESP)):
        nextvalues = values[:, t + 1] if t < RESP - 1 else 0.0
        delta = rewards[:, t] + GAMMA * nextvalues - values[:, t]
        lastgaelam = delta + GAMMA * LAM * lastgaelam
        advantages_reversed.append(lastgaelam)
    advantages = torch.stack(advantages_reversed[::-1]).transpose(0, 1)
    returns = advantages + values
    advantages = whiten(advantages).detach()
print(
    f"rollout {tuple(sequences.shape)} score {scores.mean().item():.4f}"
    f" kl {kl.sum(1).mean().item():.4f} {mark()}"
)
cut()

model.train()
for epoch in range(PPO_EPOCHS):
    perm = torch.randperm(B, device=device)
    for start in range(0, B, MB):
        idx = perm[start : start + MB]
        logits, vpred = model(sequences[idx], attention_mask[idx])
        logprobs = logprobs_from_logits(logits[:, :-1, :], sequences[idx, 1:])[:, -RESP:]
        vpred = vpred[:, -RESP - 1 : -1].float()
        vpredclipped = torch.clamp(vpred, values[idx] - CLIPRANGE_VALUE, values[idx] + CLIPRANGE_VALUE)
        vf_losses1 = (vpred - returns[idx]) ** 2
        vf_losses2 = (vpredclipped - returns[idx]) ** 2
        vf_loss = 0.5 * torch.mean(torch.max(vf_losses1, vf_losses2))
        ratio = torch.exp(logprobs - old_logprobs[idx])
        pg_losses = -advantages[idx] * ratio
        pg_losses2 = -advantages[idx] * torch.clamp(ratio, 1.0 - CLIPRANGE, 1.0 + CLIPRANGE)
        pg_loss = torch.mean(torch.max(pg_losses, pg_losses2))
        loss = pg_loss + VF_COEF * vf_loss
        approxkl = 0.5 * torch.mean((logprobs - old_logprobs[idx]) ** 2)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    print(f"ppo epoch {epoch} loss {loss.item():.4f} approxkl {approxkl.item():.6f} {mark()}")
    cut()
    del logits, vpred, logprobs, loss

model.eval()
with torch.inference_mode():
    eval_queries = torch.randint(1, config.vocab_size, (B, QUERY), device=device)
    eval_seq = model.generate(
        eval_queries, attention_mask=torch.ones_like(eval_queries), do_sample=False, max_new_tokens=EVAL_NEW,
        min_new_tokens=EVAL_NEW, pad_token_id=0,
    )  # fmt: skip
    eval_scores = reward_model(input_ids=eval_seq, attention_mask=torch.ones_like(eval_seq)).logits[:, 0]
print(f"eval {tuple(eval_seq.shape)} score {eval_scores.float().mean().item():.4f} {mark()}")
