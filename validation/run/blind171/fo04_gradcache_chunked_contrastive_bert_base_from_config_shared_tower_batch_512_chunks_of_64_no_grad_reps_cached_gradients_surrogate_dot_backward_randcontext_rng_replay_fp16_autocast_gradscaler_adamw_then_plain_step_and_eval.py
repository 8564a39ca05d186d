"""GradCache (Gao et al. 2021, luyug/GradCache's GradCache class, as Tevatron's dense retriever trains
with it) written out as its users inline it: a shared BertModel tower from BertConfig at bert-base's
size (768 wide, 12 layers, 12 heads, feed-forward 3,072, vocabulary 30,522; sdpa attention, no
pooler, [CLS] pooling) trained with a contrastive batch of 512 queries of 32 tokens and 512 passages of
160 tokens (lengths drawn by a seeded CPU generator) split in chunks of 64. Each step: (1) every chunk's
representation under no_grad (fp16 autocast), with a RandContext per chunk that saves the CPU and
CUDA RNG states (torch.utils.checkpoint's get_device_states); (2) the representations concatenated,
detached with requires_grad, the InfoNCE loss at temperature 0.02 over all 512 x 512 scores and its
scaled backward to the representations only (the cached gradients); (3) per chunk again, the
forward with gradients inside torch.random.fork_rng with the saved states restored (dropout replayed),
a surrogate torch.dot(reps.flatten(), cached.flatten()) and its backward into the weights. GradScaler
(fp16), AdamW (lr 5e-6, weight decay 0.01) with a linear warmup LambdaLR, clip_grad_norm_ at 1.0;
3 steps (the first its own phase); then one plain (uncached) step at batch 64 as the user compares;
then an evaluation: 4,096 passages encoded under no_grad at batch 512 and 256 queries' scores and
topk 20; 4 phases after the model's."""

import os

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import get_device_states, set_device_states
from transformers import BertConfig, BertModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17104)
if SMALL:
    config = BertConfig(
        vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    B, CHUNK, QL, PL, STEPS, SMALL_B, CORPUS, ENC_B, NQ = 16, 4, 8, 16, 2, 4, 32, 16, 8
else:
    config = BertConfig(
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
    )
    B, CHUNK, QL, PL, STEPS, SMALL_B, CORPUS, ENC_B, NQ = 512, 64, 32, 160, 3, 64, 4096, 512, 256
config._attn_implementation = "sdpa"
TAU = 0.02
LOW = 10 if SMALL else 1000
device = "cuda" if torch.cuda.is_available() else "cpu"
fp16 = device == "cuda"
model = BertModel(config, add_pooling_layer=False).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-6, weight_decay=0.01)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 100))
scaler = torch.amp.GradScaler("cuda", enabled=fp16)
gen = torch.Generator().manual_seed(17104)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class RandContext:
    """GradCache's RandContext: replay a chunk's dropout in the second forward."""

    def __init__(self, *tensors):
        self.fwd_cpu_state = torch.get_rng_state()
        self.fwd_gpu_devices, self.fwd_gpu_states = get_device_states(*tensors)

    def __enter__(self):
        self._fork = torch.random.fork_rng(devices=self.fwd_gpu_devices, enabled=True)
        self._fork.__enter__()
        torch.set_rng_state(self.fwd_cpu_state)
        set_device_states(self.fwd_gpu_devices, self.fwd_gpu_states)

    def __exit__(self, exc_type, exc_val, exc_tb):
        self._fork.__exit__(exc_type, exc_val, exc_tb)
        self._fork = None


def tokens(n, length):
    lengths = torch.randint(length // 3, length + 1, (n,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    ids = torch.randint(LOW, config.vocab_size, (n, length), generator=gen)
    ids[:, 0] = 101 if not SMALL else 1
    return {"input_ids": (ids * mask).to(device), "attention_mask": mask.to(device)}


def model_call(x):
    with torch.autocast("cuda", dtype=torch.float16, enabled=fp16):
        return model(**x).last_hidden_state[:, 0]


def split(x):
    return [{k: v[i : i + CHUNK] for k, v in x.items()} for i in range(0, B, CHUNK)]


def compute_loss(q, p):
    scores = q @ p.t() / TAU
    return F.cross_entropy(scores, torch.arange(q.size(0), device=q.device))


def forward_no_grad(chunks):
    reps, states = [], []
    with torch.no_grad():
        for x in chunks:
            states.append(RandContext(*x.values()))
            reps.append(model_call(x))
    return torch.cat(reps, dim=0), states


def build_cache(*reps):
    reps = [r.detach().requires_grad_() for r in reps]
    with torch.autocast("cuda", dtype=torch.float16, enabled=fp16):
        loss = compute_loss(*reps)
    scaler.scale(loss).backward()
    return [r.grad for r in reps], loss.detach()


def forward_backward(chunks, cached, states):
    for x, grad, state in zip(chunks, cached.split(CHUNK), states, strict=True):
        with state:
            y = model_call(x)
        surrogate = torch.dot(y.flatten(), grad.flatten())
        surrogate.backward()


model.train()
for step in range(STEPS):
    q_chunks, p_chunks = split(tokens(B, QL)), split(tokens(B, PL))
    q_reps, q_states = forward_no_grad(q_chunks)
    p_reps, p_states = forward_no_grad(p_chunks)
    (q_cache, p_cache), loss = build_cache(q_reps, p_reps)
    forward_backward(q_chunks, q_cache, q_states)
    forward_backward(p_chunks, p_cache, p_states)
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del q_chunks, p_chunks, q_reps, p_reps, q_states, p_states, q_cache, p_cache, loss

q, p = tokens(SMALL_B, QL), tokens(SMALL_B, PL)
loss = compute_loss(model_call(q), model_call(p))
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
optimizer.zero_grad(set_to_none=True)
print(f"plain step loss {loss.item():.4f}")
del q, p, loss
if device == "cuda":
    print(f"plain peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    corpus = torch.cat([model_call(tokens(ENC_B, PL)) for _ in range(CORPUS // ENC_B)])
    queries = model_call(tokens(NQ, QL))
    top = (queries @ corpus.t()).topk(20, dim=1)
print(f"eval top {tuple(top.indices.shape)} corpus {tuple(corpus.shape)} {corpus.dtype}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
