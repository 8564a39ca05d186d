"""FlexAttention compiled: `torch.compile(flex_attention)` inside a hand-written decoder, and transformers'
`attn_implementation="flex_attention"` (which compiles flex_attention itself).

Phase 1: a 4-layer decoder (d 1024, 16 heads of 64, MLP 4096) whose attention calls a compiled
flex_attention with a causal + document `create_block_mask` (documents of 512 tokens, ids drawn on the
host), bf16 weights, 3 AdamW steps at batch 4 x 2048. Phase 2: the same model under no_grad at batch 8
(the compiled kernel without logsumexp). Phase 3: a Llama from config (4 layers, d 1024, 16 heads, 4 KV
heads, MLP 2816, vocab 32000) with attn_implementation="flex_attention", fp32 weights under bf16 autocast,
2 AdamW steps at batch 4 x 1024; then an eval forward under no_grad. No value-dependent sizes. 3 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(2334)
device = "cuda"
D, H, L, V, T = 1024, 16, 4, 32000, 2048
flex = torch.compile(flex_attention)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


doc = (torch.arange(T) // 512).to(device)


def causal_doc(b, h, q, kv):
    return (q >= kv) & (doc[q] == doc[kv])


mask = create_block_mask(causal_doc, None, None, T, T, device=device)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D, bias=False), nn.Linear(4 * D, D, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = flex(q, k, v, block_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


model = Decoder().to(device, torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(3):
    idx = torch.randint(0, V, (4, T), device=device)
    loss = F.cross_entropy(model(idx).flatten(0, 1).float(), idx.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("flex step", step, loss.item())
del loss
report("compiled flex decoder bf16 train")

with torch.no_grad():
    logits = model(torch.randint(0, V, (8, T), device=device))
    print("eval", tuple(logits.shape))
del logits
report("compiled flex no_grad")

del model, opt
cfg = LlamaConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=4,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=2048,
)
llama = LlamaForCausalLM._from_config(cfg, attn_implementation="flex_attention").to(device)
opt = torch.optim.AdamW(llama.parameters(), lr=1e-4)
for step in range(2):
    idx = torch.randint(0, V, (4, 1024), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = llama(input_ids=idx, labels=idx).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("hf flex step", step, loss.item())
del loss
llama.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    out = llama(input_ids=torch.randint(0, V, (4, 1024), device=device)).logits
    print("hf eval", tuple(out.shape))
del out
report("hf llama flex_attention")
