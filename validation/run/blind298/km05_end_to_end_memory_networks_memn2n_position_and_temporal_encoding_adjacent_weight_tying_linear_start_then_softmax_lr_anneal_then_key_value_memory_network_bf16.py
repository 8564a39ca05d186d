"""End-To-End Memory Networks (Sukhbaatar et al., 2015) as the bAbI tutorials implement them, then a
Key-Value Memory Network (Miller et al., 2016) reading a larger memory; synthetic bAbI-like stories
of word ids (vocabulary 4,000, 50 sentences of up to 12 words per story).

The MemN2N has 3 hops with adjacent weight tying (hop k's output embedding C^k is hop k+1's input
embedding A^{k+1}, so 4 embedding matrices for 3 hops), sentence vectors summed with the position
encoding l_kj = (1 - j/J) - (k/d)(1 - 2j/J), a learned temporal encoding added per memory slot,
padding id 0 (padding_idx), the answer predicted by W (C^3 transposed) from u^3 = u^2 + o^2.
Phases: (1) linear start: 20 SGD steps at batch 256 with the memory softmax removed (attention is
the raw dot products), gradient norm clipped at 40; (2) the softmax inserted, 20 more steps with the
learning rate annealed by halving every 5 steps (param_groups lr set by hand), plus 10% random empty
memories (random noise, the paper's "RN"); (3) evaluation under no_grad over 4 batches of 1024,
attention weights of every hop kept for inspection; (4) a Key-Value Memory Network with 2 hops over
1,024 key/value slots per question (keys and values from separate bag-of-words embeddings, query
updated by R_j (q + o)), 12 Adam steps at batch 64 under bf16 autocast, then scoring 20,000
candidate answers by dot product with their embeddings. 4 phases."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(29805)
device = "cuda" if torch.cuda.is_available() else "cpu"
V, D, MEM, J, HOPS, B = 4000, 128, 50, 12, 3, 256
KV_SLOTS, KV_B, KV_D, KV_CAND, KV_HOPS = 1024, 64, 256, 20000, 2


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def position_encoding(sentence_size, embedding_size):
    encoding = torch.ones(embedding_size, sentence_size)
    ls, le = sentence_size + 1, embedding_size + 1
    for i in range(1, le):
        for j in range(1, ls):
            encoding[i - 1, j - 1] = (i - (le - 1) / 2) * (j - (ls - 1) / 2)
    encoding = 1 + 4 * encoding / embedding_size / sentence_size
    encoding[:, -1] = 1.0
    return encoding.t()


class MemN2N(nn.Module):
    def __init__(self):
        super().__init__()
        self.C = nn.ModuleList([nn.Embedding(V, D, padding_idx=0) for _ in range(HOPS + 1)])
        for emb in self.C:
            emb.weight.data.normal_(0, 0.1)
        self.TA = nn.Parameter(torch.randn(HOPS + 1, MEM, D) * 0.1)
        self.register_buffer("encoding", position_encoding(J, D))
        self.linear_start = True

    def forward(self, story, query):
        u = [(self.C[0](query) * self.encoding).sum(1)]
        attentions = []
        for hop in range(HOPS):
            m_A = (self.C[hop](story) * self.encoding).sum(2) + self.TA[hop]
            m_C = (self.C[hop + 1](story) * self.encoding).sum(2) + self.TA[hop + 1]
            scores = torch.bmm(m_A, u[-1].unsqueeze(2)).squeeze(2)
            prob = scores if self.linear_start else F.softmax(scores, dim=-1)
            attentions.append(prob)
            o_k = torch.bmm(prob.unsqueeze(1), m_C).squeeze(1)
            u.append(u[-1] + o_k)
        a_hat = u[-1] @ self.C[HOPS].weight.transpose(0, 1)
        return a_hat, attentions


def stories(b, noise=0.0):
    lengths = torch.randint(3, J + 1, (b, MEM, 1), device=device)
    story = torch.randint(1, V, (b, MEM, J), device=device)
    story = story * (torch.arange(J, device=device) < lengths)
    if noise:
        story = story * (torch.rand(b, MEM, 1, device=device) >= noise)
    query = torch.randint(1, V, (b, J), device=device)
    answer = torch.randint(1, V, (b,), device=device)
    return story, query, answer


model = MemN2N().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.005)
for _ in range(20):
    story, query, answer = stories(B)
    logits, _ = model(story, query)
    loss = F.cross_entropy(logits, answer, reduction="sum")
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 40.0)
    opt.step()
    with torch.no_grad():
        for emb in model.C:
            emb.weight[0].zero_()
print(f"linear start loss {loss.item() / B:.4f}")
report("linear start")

model.linear_start = False
for step in range(20):
    if step % 5 == 0:
        for group in opt.param_groups:
            group["lr"] = 0.01 / (2 ** (step // 5))
    story, query, answer = stories(B, noise=0.1)
    logits, _ = model(story, query)
    loss = F.cross_entropy(logits, answer, reduction="sum")
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 40.0)
    opt.step()
print(f"softmax loss {loss.item() / B:.4f}")
report("softmax annealed random noise")

model.eval()
correct, kept = 0, []
with torch.no_grad():
    for _ in range(4):
        story, query, answer = stories(1024)
        logits, attentions = model(story, query)
        correct += (logits.argmax(1) == answer).sum().item()
        kept.append(torch.stack(attentions, 1).cpu())
print(f"eval accuracy {correct / 4096:.4f} attention {tuple(torch.cat(kept).shape)}")
report("evaluation")


class KVMemNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.A = nn.EmbeddingBag(V, KV_D, mode="sum", padding_idx=0)
        self.A_value = nn.EmbeddingBag(V, KV_D, mode="sum", padding_idx=0)
        self.B = nn.Embedding(KV_CAND, KV_D)
        self.R = nn.ModuleList([nn.Linear(KV_D, KV_D, bias=False) for _ in range(KV_HOPS)])

    def forward(self, keys, values, question):
        b, s, _ = keys.shape
        k = self.A(keys.flatten(0, 1)).view(b, s, -1)
        v = self.A_value(values.flatten(0, 1)).view(b, s, -1)
        q = self.A(question)
        for R in self.R:
            p = F.softmax(torch.einsum("bsd,bd->bs", k, q), dim=-1)
            o = torch.einsum("bs,bsd->bd", p, v)
            q = R(q + o)
        return q @ self.B.weight.t()


del opt
kv = KVMemNN().to(device)
opt = torch.optim.Adam(kv.parameters(), lr=1e-3)
for _ in range(12):
    keys = torch.randint(0, V, (KV_B, KV_SLOTS, 6), device=device)
    values = torch.randint(0, V, (KV_B, KV_SLOTS, 2), device=device)
    question = torch.randint(1, V, (KV_B, J), device=device)
    answer = torch.randint(0, KV_CAND, (KV_B,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        scores = kv(keys, values, question)
    loss = F.cross_entropy(scores.float(), answer)
    opt.zero_grad()
    loss.backward()
    opt.step()
kv.eval()
with torch.no_grad():
    scores = kv(keys, values, question)
    top = scores.topk(5, dim=1)
print(f"kv memory loss {loss.item():.4f} top answers {tuple(top.indices.shape)}")
report("key value memory network")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
