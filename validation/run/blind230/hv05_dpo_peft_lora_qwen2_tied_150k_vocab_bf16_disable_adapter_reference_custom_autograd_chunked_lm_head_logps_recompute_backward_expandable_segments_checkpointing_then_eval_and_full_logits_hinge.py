"""Offline DPO with peft LoRA adapters on a Hugging Face Qwen2ForCausalLM built from a Qwen2Config (random init,
nothing downloaded; tied embeddings and a 151,936-token vocabulary, so the logits dominate), the reference being
the same model with its adapters disabled, and the log-probabilities computed in chunks by a custom
torch.autograd.Function that never holds the whole logits tensor.

Set at the top: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.

Model: Qwen2Config(hidden 1536, intermediate 4096, 12 layers, 12 heads with 2 key/value heads, vocabulary 151,936,
tie_word_embeddings, SDPA attention), base in bf16, frozen. peft LoraConfig(r 32, alpha 64, no dropout, q/k/v/o
projections); peft keeps the adapters in fp32; gradient checkpointing (non-reentrant) on the base with
enable_input_require_grads. The reference pass is `with model.disable_adapter(), torch.no_grad()`.

Chunked log-probabilities: ChunkedLogps.apply(hidden [N, 1536] bf16, lm_head weight, targets [N], chunk 2048) loops
over row chunks, computes the chunk's logits (bf16 matmul, then fp32), logsumexp and the target logit, and saves
only the hidden states and the per-row logsumexp; its backward recomputes each chunk's softmax and returns
grad_output * (onehot - softmax) @ weight for the hidden states (the tied weight is frozen).

Data: 8 random pairs a step; prompt 256 tokens, chosen and rejected answers 512 tokens; chosen and rejected
concatenated into 16 rows of 768 tokens. Training: DPO sigmoid loss (beta 0.1) under bf16 autocast,
torch.optim.AdamW(fused=True) lr 5e-5 on the adapters, clip 1.0. Evaluation: reward accuracy under no_grad at 8
pairs. Variant: checkpointing off, the log-probabilities from the model's full logits (lm_head output .float(),
log_softmax, gather), SLiC hinge loss (relu(1 - beta * margin)), 4 pairs a step, a new AdamW (foreach).

Phases: the first DPO step; 3 more; evaluation; the first hinge step on full logits; 2 more. 5 phases."""

import os

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2305)
if SMALL:
    cfg = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    VOCAB, PROMPT, ANSWER, PAIRS, CHUNK = 2048, 16, 32, 2, 40
else:
    cfg = dict(hidden_size=1536, intermediate_size=4096, num_hidden_layers=12, num_attention_heads=12,
               num_key_value_heads=2)
    VOCAB, PROMPT, ANSWER, PAIRS, CHUNK = 151936, 256, 512, 8, 2048
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
BETA = 0.1


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class ChunkedLogps(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk):
        lse = torch.empty(hidden.shape[0], device=hidden.device, dtype=torch.float32)
        tgt = torch.empty_like(lse)
        for s in range(0, hidden.shape[0], chunk):
            logits = (hidden[s : s + chunk] @ weight.t()).float()
            lse[s : s + chunk] = torch.logsumexp(logits, -1)
            tgt[s : s + chunk] = logits.gather(-1, targets[s : s + chunk, None]).squeeze(-1)
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.chunk = chunk
        return tgt - lse

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, targets, lse = ctx.saved_tensors
        grad_hidden = torch.empty_like(hidden)
        for s in range(0, hidden.shape[0], ctx.chunk):
            logits = (hidden[s : s + ctx.chunk] @ weight.t()).float()
            grad_logits = torch.exp(logits - lse[s : s + ctx.chunk, None]).neg_()
            grad_logits.scatter_add_(-1, targets[s : s + ctx.chunk, None], torch.ones_like(lse[s : s + ctx.chunk, None]))
            grad_logits.mul_(grad_out[s : s + ctx.chunk, None])
            grad_hidden[s : s + ctx.chunk] = grad_logits.to(hidden.dtype) @ weight
        return grad_hidden, None, None, None


config = Qwen2Config(vocab_size=VOCAB, tie_word_embeddings=True, max_position_embeddings=2048,
                     attn_implementation="sdpa", **cfg)
base = Qwen2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
base.enable_input_require_grads()
base.config.use_cache = False
model = get_peft_model(base, LoraConfig(r=32, lora_alpha=64, lora_dropout=0.0,
                                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
model.print_trainable_parameters()
decoder = model.base_model.model.model
lm_head = model.base_model.model.lm_head


def make_pairs(n):
    prompt = torch.randint(0, VOCAB, (n, PROMPT), device=device)
    answers = torch.randint(0, VOCAB, (2 * n, ANSWER), device=device)
    return torch.cat([prompt.repeat(2, 1), answers], 1)


def chunked_logps(ids):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        hidden = decoder(input_ids=ids).last_hidden_state[:, PROMPT - 1 : -1]
    hidden = hidden.to(torch.bfloat16).reshape(-1, hidden.shape[-1])
    lp = ChunkedLogps.apply(hidden, lm_head.weight, ids[:, PROMPT:].reshape(-1), CHUNK)
    return lp.view(ids.shape[0], -1).sum(-1)


def full_logps(ids):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(input_ids=ids).logits[:, PROMPT - 1 : -1]
    return logits.float().log_softmax(-1).gather(-1, ids[:, PROMPT:, None]).squeeze(-1).sum(-1)


def log_ratios(ids, logps_fn):
    n = ids.shape[0] // 2
    pol = logps_fn(ids)
    with model.disable_adapter(), torch.no_grad():
        ref = logps_fn(ids)
    return (pol[:n] - ref[:n]) - (pol[n:] - ref[n:])


trainable = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=5e-5, weight_decay=0.0, fused=device == "cuda")


def dpo_step():
    loss = -F.logsigmoid(BETA * log_ratios(make_pairs(PAIRS), chunked_logps)).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"dpo step 0 loss {dpo_step():.4f}")
report("dpo first step")
for _ in range(3):
    loss = dpo_step()
print(f"dpo step 3 loss {loss:.4f}")
report("dpo train")

model.eval()
with torch.no_grad():
    margin = log_ratios(make_pairs(PAIRS), chunked_logps)
print(f"eval accuracy {(margin > 0).float().mean().item():.3f} margin {BETA * margin.mean().item():.4f}")
report("eval")

base.gradient_checkpointing_disable()
model.train()
del opt
opt = torch.optim.AdamW(trainable, lr=5e-5, weight_decay=0.0, foreach=True)


def hinge_step():
    loss = torch.relu(1 - BETA * log_ratios(make_pairs(PAIRS // 2), full_logps)).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


print(f"hinge step 0 loss {hinge_step():.4f}")
report("hinge first step")
for _ in range(2):
    loss = hinge_step()
print(f"hinge step 2 loss {loss:.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
