"""A sentence encoder over variable-length batches without padding: `torch.nested` jagged tensors.

Each batch holds 64 sentences with fixed random lengths between 16 and 512 tokens (drawn on the CPU
with a seeded generator, so the sizes never follow values). Tokens are embedded packed (one dense
(total, 512) tensor) and wrapped with `torch.nested.nested_tensor_from_jagged(values, offsets)`; 6
pre-norm transformer layers (d 512, 8 heads, MLP 2048) run on the jagged tensor: nn.Linear,
nn.LayerNorm and residual adds on the jagged layout, heads by unflatten/transpose, and
`F.scaled_dot_product_attention` on jagged q, k, v (the flash varlen kernel under bf16 autocast).
Sentence vectors are the mean over each sentence's tokens (a segment sum by `index_add_` over the
packed values in training; `to_padded_tensor` and a sum over the padded dim at inference; the jagged
tensors are built with `max_seqlen` given, as `to_padded_tensor` pads to the packed length without it),
trained with an in-batch contrastive loss (two dropout views of the same batch, temperature 0.05) under
bf16 autocast, AdamW (fused), 4 steps. Then an inference_mode encoding of 4 batches of 128 sentences
with a `torch.cuda.jiterator` kernel replacing the MLP's activation (fused squared ReLU, one
elementwise kernel over the packed values), and a retrieval step: 512 x 512 cosine scores and top-10.
Phases: model, contrastive train bf16 jagged, jiterator inference encode, retrieval. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2403)
device = "cuda"
VOCAB, D, H, NL = 30522, 512, 8, 6
sq_relu = torch.cuda.jiterator._create_jit_fn(
    "template <typename T> T sq_relu(T x) { return x > T(0) ? x * x : T(0); }"
)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)
        self.drop = nn.Dropout(0.1)
        self.jit_act = False

    def forward(self, x, max_len):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (H, D // H)).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0)
        x = x + self.drop(self.out(a.transpose(1, 2).flatten(-2)))
        h = self.fc1(self.ln2(x))
        if self.jit_act:
            h = torch.nested.nested_tensor_from_jagged(sq_relu(h.values()), h.offsets(), max_seqlen=max_len)
        else:
            h = F.relu(h).square()
        return x + self.drop(self.fc2(h))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList([Layer() for _ in range(NL)])
        self.ln = nn.LayerNorm(D)

    def forward(self, tokens, offsets, lengths, seg, max_len, padded=False):
        x = torch.nested.nested_tensor_from_jagged(self.emb(tokens), offsets, max_seqlen=max_len)
        for layer in self.layers:
            x = layer(x, max_len)
        x = self.ln(x)
        if padded:
            pad = torch.nested.to_padded_tensor(x, 0.0)  # (B, max_len, D)
            return pad.sum(1) / lengths.unsqueeze(-1).to(pad.dtype)
        # segment mean over the packed values: index_add_ by each token's sentence id
        vals = x.values()
        summed = torch.zeros(lengths.shape[0], D, device=vals.device, dtype=vals.dtype).index_add_(0, seg, vals)
        return summed / lengths.unsqueeze(-1).to(vals.dtype)


def make_batch(n, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(16, 513, (n,), generator=g)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    tokens = torch.randint(0, VOCAB, (int(offsets[-1]),), generator=g)
    seg = torch.repeat_interleave(torch.arange(n), lengths)
    return tokens.to(device), offsets.to(device), lengths.to(device), seg.to(device), int(lengths.max())


with torch.device(device):  # built on the GPU, not on the host first
    model = Encoder()
print("parameters", sum(p.numel() for p in model.parameters()))
report("model")

opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01, fused=True)
for step in range(4):
    tokens, offsets, lengths, seg, max_len = make_batch(64, step)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        a = F.normalize(model(tokens, offsets, lengths, seg, max_len).float(), dim=-1)
        b = F.normalize(model(tokens, offsets, lengths, seg, max_len).float(), dim=-1)
        logits = a @ b.t() / 0.05
        labels = torch.arange(64, device=device)
        loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} tokens {tokens.numel()} loss {loss.item():.4f}")
del tokens, offsets, lengths, seg, a, b, logits, loss
report("contrastive train bf16 jagged")

model.eval()
for layer in model.layers:
    layer.jit_act = True
bank = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for i in range(4):
        tokens, offsets, lengths, seg, max_len = make_batch(128, 100 + i)
        bank.append(F.normalize(model(tokens, offsets, lengths, seg, max_len, padded=True).float(), dim=-1))
    bank = torch.cat(bank)
del tokens, offsets, lengths, seg
report("jiterator inference encode")

with torch.inference_mode():
    scores = bank @ bank.t()
    scores.fill_diagonal_(-1.0)
    top = scores.topk(10, dim=-1)
    print("retrieval", tuple(top.indices.shape), top.values.mean().item())
report("retrieval")
