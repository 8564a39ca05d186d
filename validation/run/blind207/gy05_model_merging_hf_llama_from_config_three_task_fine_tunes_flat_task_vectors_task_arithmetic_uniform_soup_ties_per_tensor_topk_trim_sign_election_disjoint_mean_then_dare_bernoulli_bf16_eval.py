"""Model merging on the GPU (task arithmetic, Ilharco et al. 2023; TIES-Merging, Yadav et al. 2023;
DARE, Yu et al. 2024) over three fine-tunes of one LlamaForCausalLM from LlamaConfig, random data.

Model: 8 layers of 1024 (16 heads, 4 key/value heads, SwiGLU 2816, vocabulary 32,000), fp32 weights.
Three "tasks" each fine-tune a copy of the same initial weights (load_state_dict from a GPU clone of the
base state) for 2 steps of bf16 autocast with a fresh foreach AdamW; each task vector
(parameters_to_vector(fine-tuned) - base vector) becomes a row of a 3 x N fp32 matrix on the GPU.
Merges: task arithmetic (base + 0.4 * sum of task vectors) and the uniform soup (the mean of the three
fine-tunes); TIES: keep the top 20% of every
task vector by magnitude tensor by tensor (peft's magnitude_based_pruning: torch.topk of |delta|
flattened, a zeros mask set at the top-k indices), elect the sign by the summed mass (torch.where), the
disjoint mean over the agreeing entries, copied into the parameters; DARE: drop 90% of the flat task
vectors with torch.bernoulli and rescale by 1/0.1, then the same sign election and disjoint mean.
Every merge is loaded by vector_to_parameters and evaluated by the loss on 8 x 1024 random tokens under
inference_mode (bf16 autocast); the DARE merge is evaluated in a .bfloat16() copy after empty_cache.

Phases: the first task's fine-tune; the other two; task arithmetic and soup evaluation; TIES; DARE and
its bf16 evaluation. 5 phases."""

import copy
import os

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters
from transformers import LlamaConfig, LlamaForCausalLM

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2075)
if SMALL:
    cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    SEQ, BATCH, EVAL_B = 64, 2, 2
else:
    cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=2048,
    )
    SEQ, BATCH, EVAL_B = 1024, 8, 8
TASKS, DENSITY, DARE_KEEP = 3, 0.2, 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = LlamaForCausalLM(cfg).to(device)
base_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
base_vec = parameters_to_vector(model.parameters()).detach()
N = base_vec.numel()
print(f"params {N / 1e6:.1f}M")
task_vectors = torch.empty(TASKS, N, device=device)

for t in range(TASKS):
    model.load_state_dict(base_state)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4 * (t + 1), weight_decay=0.01, foreach=True)
    for step in range(2):
        ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    del opt
    with torch.no_grad():
        task_vectors[t] = parameters_to_vector(model.parameters()) - base_vec
    print(f"task {t} loss {loss.item():.4f}")
    if t == 0:
        report("task 0 fine-tune")
report("tasks 1-2 fine-tune")

eval_ids = torch.randint(0, cfg.vocab_size, (EVAL_B, SEQ), device=device)


@torch.inference_mode()
def evaluate(m, vec=None):
    if vec is not None:
        vector_to_parameters(vec, m.parameters())
    m.eval()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        return m(input_ids=eval_ids, labels=eval_ids).loss.item()


with torch.no_grad():
    arithmetic = base_vec + 0.4 * task_vectors.sum(dim=0)
    print(f"task arithmetic loss {evaluate(model, arithmetic):.4f}")
    del arithmetic
    soup = base_vec + task_vectors.mean(dim=0)
    print(f"uniform soup loss {evaluate(model, soup):.4f}")
    del soup
report("task arithmetic and soup")


def magnitude_prune(delta, density):
    """peft.utils.merge_utils.magnitude_based_pruning: keep the top density of |delta|."""
    mask = torch.zeros_like(delta).reshape(-1)
    k = int(density * delta.numel())
    top_k = torch.topk(delta.abs().reshape(-1), k=k, largest=True)
    mask[top_k[1]] = 1
    return delta * mask.reshape(delta.shape)


def majority_sign_mask(stacked):
    """Sign election: the sign of the summed mass, ties to +."""
    sign_magnitude = stacked.sum(dim=0)
    majority_sign = torch.where(sign_magnitude >= 0, 1, -1)
    return stacked.sign() == majority_sign


def disjoint_merge(stacked, mask):
    """Mean over the task vectors whose sign agrees with the elected one."""
    merged = (stacked * mask).sum(dim=0)
    return merged / torch.clamp(mask.sum(dim=0), min=1.0)


with torch.no_grad():
    offset = 0
    kept = 0
    for p in model.parameters():
        n = p.numel()
        deltas = task_vectors[:, offset : offset + n].view(TASKS, *p.shape)
        trimmed = torch.stack([magnitude_prune(d, DENSITY) for d in deltas])
        kept += int((trimmed != 0).sum())
        merged = disjoint_merge(trimmed, majority_sign_mask(trimmed))
        p.copy_(base_vec[offset : offset + n].view_as(p) + 1.0 * merged)
        offset += n
        del trimmed, merged
    print(f"kept {kept / (TASKS * N):.3f} TIES loss {evaluate(model):.4f}")
report("ties")

with torch.no_grad():
    keep = torch.bernoulli(torch.full_like(task_vectors, DARE_KEEP))
    dropped = task_vectors * keep / DARE_KEEP
    del keep
    merged = disjoint_merge(dropped, majority_sign_mask(dropped))
    del dropped
    dare = base_vec + merged
    del merged
    vector_to_parameters(dare, model.parameters())
    del dare
if device == "cuda":
    torch.cuda.empty_cache()
bf16_model = copy.deepcopy(model).bfloat16()
print(f"DARE-TIES bf16 loss {evaluate(bf16_model):.4f}")
report("dare bf16")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
