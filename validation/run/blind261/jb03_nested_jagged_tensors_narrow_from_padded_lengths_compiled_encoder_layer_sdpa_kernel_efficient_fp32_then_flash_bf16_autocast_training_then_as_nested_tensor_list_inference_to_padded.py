"""Variable-length batches as nested jagged tensors (`layout=torch.jagged`), three ways users build them and
two SDPA backends chosen explicitly with `torch.nn.attention.sdpa_kernel`.

A 4-layer pre-norm encoder (d 768, 12 heads of 64, MLP 3072, vocab 30000) for a token-classification task.
Batches of 32 sequences with fixed lengths between 32 and 1024 (drawn on the CPU with a seeded generator).
Phase 1: fp32 scoring under no_grad, the padded (32, 1024) batch turned jagged by
`torch.nested.narrow(padded, 1, 0, lengths, layout=torch.jagged)` (a jagged view with holes over the
padded storage) after the embedding, packed by `.contiguous()` (nn.Linear takes only a contiguous
jagged tensor); attention under `sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION)` (the memory-efficient
varlen kernel in fp32; it refuses jagged inputs that require grad); 2 batches. Phase 2: training, the
whole encoder `torch.compile`d, under bf16 autocast with `sdpa_kernel(SDPBackend.FLASH_ATTENTION)`,
tokens packed with `nested_tensor_from_jagged(values, offsets)`, loss on the packed values, AdamW;
3 steps. Phase 3: inference of a list of 64 sequences of token ids made jagged by
`torch.nested.as_nested_tensor(list, layout=torch.jagged)`, the model cast to bf16, under
inference_mode, logits back to a padded tensor with `to_padded_tensor`. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(2613)
V, D, H, L, NCLS, MAXLEN, B = 30000, 768, 12, 4, 17, 1024, 32
gen = torch.Generator().manual_seed(26130)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        # x: (B, j, D) jagged
        q, k, v = self.qkv(self.n1(x)).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (H, D // H)).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.o(a.transpose(1, 2).flatten(-2))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.cls = nn.Linear(D, NCLS)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.cls(self.norm(x))


emb = nn.Embedding(V, D).cuda()
enc = Encoder().cuda()
opt = torch.optim.AdamW(list(emb.parameters()) + list(enc.parameters()), lr=2e-4, foreach=True)
report("model_fp32")


def lengths_batch():
    return torch.randint(32, MAXLEN + 1, (B,), generator=gen)


# fp32 scoring, narrow of the padded batch, memory-efficient attention chosen explicitly
enc.eval()
with torch.no_grad():
    for _ in range(2):
        lengths = lengths_batch()
        tokens = torch.randint(0, V, (B, MAXLEN), device="cuda")
        x = torch.nested.narrow(emb(tokens), 1, 0, lengths.cuda(), layout=torch.jagged).contiguous()
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            logits = enc(x)
        probs = logits.values().softmax(-1)
        print("scored tokens", tuple(probs.shape))
        del x, logits, probs, tokens
report("score_fp32_narrow_jagged_efficient_attention")

enc.train()
compiled = torch.compile(enc)
for _ in range(3):
    lengths = lengths_batch()
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]).cuda()
    tokens = torch.randint(0, V, (int(lengths.sum()),), device="cuda")
    x = torch.nested.nested_tensor_from_jagged(emb(tokens), offsets, max_seqlen=int(lengths.max()))
    with torch.autocast("cuda", dtype=torch.bfloat16), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        logits = compiled(x)
    labels = torch.randint(0, NCLS, (tokens.numel(),), device="cuda")
    loss = F.cross_entropy(logits.values().float(), labels)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del x, logits, loss, labels, tokens, offsets
report("train_compiled_bf16_flash_jagged")

enc.to(torch.bfloat16)
emb.to(torch.bfloat16)
with torch.inference_mode():
    lens = torch.randint(16, 768, (64,), generator=gen).tolist()
    seqs = [torch.randint(0, V, (n,), device="cuda") for n in lens]
    ids = torch.nested.as_nested_tensor(seqs, layout=torch.jagged)
    x = torch.nested.nested_tensor_from_jagged(emb(ids.values()), ids.offsets(), max_seqlen=max(lens))
    logits = enc(x)
    padded = torch.nested.to_padded_tensor(logits, 0.0)
    pred = padded.argmax(-1)
    print("padded logits", tuple(padded.shape), tuple(pred.shape))
    del seqs, ids, x, logits, padded, pred
report("inference_as_nested_tensor_list_bf16_to_padded")
