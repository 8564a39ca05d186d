"""kNN-LM (Khandelwal et al. 2020) around a GPT-2 small from GPT2Config, on random tokens, with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set before torch is imported.

Training: 3 steps of bf16 autocast with fused AdamW at batch 8 x 1024 (first step reported alone).
Datastore: under inference_mode the LM runs over 512 sequences of 1024 tokens in batches of 16; the
final hidden states (after ln_f, the kNN-LM keys) are stored as fp16 rows of a preallocated
524,288 x 768 tensor and the next tokens as int64 values; the key norms are kept in fp32.
kNN-LM evaluation: 4 x 1024 query tokens; for each block of 1024 queries the exact squared L2 distances
to every datastore chunk of 65,536 keys come from torch.cdist in fp32, the 1024 nearest of each chunk
are merged with the running best by topk, the neighbours' softmax(-d) is scatter_add-ed into a
vocabulary-sized distribution and interpolated with the LM's (lambda 0.25) through logsumexp.
Decoding: the optimizer freed and empty_cache; greedy decoding of 32 tokens after a 256-token prompt at
batch 8 with the KV cache, every step's next-token distribution interpolated with a kNN lookup
(fp16 inner products minus half the key norms, top-64). 4 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2074)
if SMALL:
    cfg = GPT2Config(vocab_size=512, n_positions=128, n_embd=64, n_layer=2, n_head=4)
    SEQ, BATCH, STORE_SEQS, STORE_BATCH, KCHUNK, QCHUNK, K, PROMPT, NEW, GEN_B = (
        128,
        2,
        16,
        4,
        512,
        64,
        32,
        16,
        4,
        2,
    )
else:
    cfg = GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)
    SEQ, BATCH, STORE_SEQS, STORE_BATCH, KCHUNK, QCHUNK, K = 1024, 8, 512, 16, 65536, 1024, 1024
    PROMPT, NEW, GEN_B = 256, 32, 8
V = cfg.vocab_size
LAMBDA = 0.25
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = GPT2LMHeadModel(cfg).to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=amp)
model.train()
for step in range(3):
    ids = torch.randint(0, V, (BATCH, SEQ), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0:
        report("first step")
report("train")

model.eval()
n_keys = STORE_SEQS * (SEQ - 1)
keys = torch.empty(n_keys, cfg.n_embd, dtype=torch.float16, device=device)
vals = torch.empty(n_keys, dtype=torch.long, device=device)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    pos = 0
    for s in range(0, STORE_SEQS, STORE_BATCH):
        ids = torch.randint(0, V, (STORE_BATCH, SEQ), device=device)
        h = model.transformer(input_ids=ids).last_hidden_state[:, :-1]
        n = h.shape[0] * h.shape[1]
        keys[pos : pos + n] = h.reshape(n, -1)
        vals[pos : pos + n] = ids[:, 1:].reshape(n)
        pos += n
    key_sq = keys.float().pow(2).sum(dim=1)
print(f"datastore {tuple(keys.shape)} {keys.element_size() * keys.numel() / 2**20:.0f} MiB")


def knn_logprobs(q, dists_fn, k):
    """Nearest neighbours of q over the datastore in chunks, merged by topk, as a log distribution."""
    best_d = torch.full((q.shape[0], k), float("inf"), device=device)
    best_i = torch.zeros((q.shape[0], k), dtype=torch.long, device=device)
    for s in range(0, n_keys, KCHUNK):
        d = dists_fn(q, s, min(s + KCHUNK, n_keys))
        cd, ci = d.topk(k, dim=1, largest=False)
        all_d = torch.cat([best_d, cd], dim=1)
        all_i = torch.cat([best_i, ci + s], dim=1)
        best_d, j = all_d.topk(k, dim=1, largest=False)
        best_i = all_i.gather(1, j)
    w = F.softmax(-best_d, dim=1)
    p = torch.zeros(q.shape[0], V, device=device).scatter_add_(1, vals[best_i], w)
    return p.clamp_min(1e-10).log()


def l2_cdist(q, s, e):
    return torch.cdist(q, keys[s:e].float()).pow(2)


with torch.inference_mode():
    ids = torch.randint(0, V, (4, SEQ), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        out = model(input_ids=ids, output_hidden_states=True)
    q_all = out.hidden_states[-1][:, :-1].reshape(-1, cfg.n_embd).float()
    lm_all = F.log_softmax(out.logits[:, :-1].float(), dim=-1).reshape(-1, V)
    target = ids[:, 1:].reshape(-1)
    del out
    nll = []
    for s in range(0, q_all.shape[0], QCHUNK):
        knn = knn_logprobs(q_all[s : s + QCHUNK], l2_cdist, K)
        lm = lm_all[s : s + QCHUNK]
        mix = torch.logsumexp(
            torch.stack([lm + torch.log(torch.tensor(1 - LAMBDA)), knn + torch.log(torch.tensor(LAMBDA))]),
            dim=0,
        )
        nll.append(-mix.gather(1, target[s : s + QCHUNK, None]))
    ppl = torch.cat(nll).mean().exp().item()
    del q_all, lm_all, nll, knn, lm, mix
print(f"kNN-LM perplexity {ppl:.2f}")
report("datastore and knn-lm eval")

del opt
if device == "cuda":
    torch.cuda.empty_cache()


def ip_dists(q, s, e):
    # -2 q.k + |k|^2 has the same order as the squared L2 distance
    return key_sq[s:e] - 2 * (q.half() @ keys[s:e].T).float()


with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    prompt = torch.randint(0, V, (GEN_B, PROMPT), device=device)
    out = model(input_ids=prompt, use_cache=True, output_hidden_states=True)
    past = out.past_key_values
    generated = []
    for t in range(NEW):
        q = out.hidden_states[-1][:, -1].float()
        lm = F.log_softmax(out.logits[:, -1].float(), dim=-1)
        knn = knn_logprobs(q, ip_dists, 64)
        mix = torch.logaddexp(lm + torch.log(torch.tensor(1 - LAMBDA)), knn + torch.log(torch.tensor(LAMBDA)))
        nxt = mix.argmax(dim=-1, keepdim=True)
        generated.append(nxt)
        out = model(input_ids=nxt, past_key_values=past, use_cache=True, output_hidden_states=True)
        past = out.past_key_values
    tokens = torch.cat(generated, dim=1).cpu()
print(f"generated {tuple(tokens.shape)}")
report("knn decode")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
